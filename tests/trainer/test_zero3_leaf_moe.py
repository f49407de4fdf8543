"""Real DeepSpeed ZeRO-3 on a Hugging Face-style MoE model (Mixtral's layout: a sparse MoE block holding a router and
an nn.ModuleList of experts, each with its own w1/w2/w3 nn.Linear, running only the experts its tokens chose) with the
MoE block marked a ZeRO-3 leaf module (deepspeed.utils.set_z3_leaf_modules, as accelerate's
deepspeed_moe_layer_cls_names and LLaMA-Factory do): the whole block is ONE fetch, the count planner/zero3.py takes
for the hf stack. Without the leaf mark the fetches follow the routing (one per expert and projection that ran)."""

import json

import pytest

from tests.trainer.zero3_probe import ENGINE, run_probe

_RUN = """
import json, sys
import torch, deepspeed
import torch.nn as nn
import torch.nn.functional as F
from deepspeed.runtime.zero import partitioned_param_coordinator as ppc
from planner import moe, zero3
from planner.layout import Layout
from planner.model import ModelSpec
from planner.scenario import ExecutionPlan

spec = ModelSpec(**json.loads(sys.argv[1]))
leaf = sys.argv[3] == "leaf"
h, E, f, k = spec.hidden, spec.moe_experts, spec.moe_ffn_hidden, spec.moe_top_k
C = ppc.PartitionedParameterCoordinator
real = C._PartitionedParameterCoordinator__all_gather_params_
seen = {"fwd": 0}
def counted(self, params, forward, quantize=False):
    if forward and any(p.ds_status == ppc.ZeroParamStatus.NOT_AVAILABLE for p in params):
        seen["fwd"] += 1
    return real(self, params, forward, quantize)
C._PartitionedParameterCoordinator__all_gather_params_ = counted

class Expert(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1, self.w3 = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False)
        self.w2 = nn.Linear(f, h, bias=False)
    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

class SparseMoeBlock(nn.Module):  # transformers 4.x MixtralSparseMoeBlock's structure and expert loop
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(h, E, bias=False)
        self.experts = nn.ModuleList(Expert() for _ in range(E))
    def forward(self, x):
        flat = x.reshape(-1, h)
        w, sel = torch.topk(F.softmax(self.gate(flat), dim=-1), k, dim=-1)
        out = torch.zeros_like(flat)
        for e in range(E):
            tok, slot = torch.where(sel == e)
            if tok.numel() == 0:
                continue  # an expert no token chose does not run
            out.index_add_(0, tok, self.experts[e](flat[tok]) * w[tok, slot, None])
        return out.reshape(x.shape)

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.o = nn.Linear(h, spec.q_dim, bias=False), nn.Linear(spec.q_dim, h, bias=False)
        self.k, self.v = nn.Linear(h, spec.kv_dim, bias=False), nn.Linear(h, spec.kv_dim, bias=False)
        self.moe = SparseMoeBlock()
    def forward(self, x):
        b, t, _ = x.shape
        hd = spec.q_dim // spec.n_heads
        q = self.q(x).view(b, t, spec.n_heads, hd).transpose(1, 2)
        kk = self.k(x).view(b, t, -1, hd).transpose(1, 2).repeat_interleave(spec.n_heads * hd // spec.kv_dim, 1)
        vv = self.v(x).view(b, t, -1, hd).transpose(1, 2).repeat_interleave(spec.n_heads * hd // spec.kv_dim, 1)
        a = F.scaled_dot_product_attention(q, kk, vv, is_causal=True).transpose(1, 2).reshape(b, t, -1)
        x = x + self.o(a)
        return x + self.moe(x)

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(spec.vocab, h)
        self.blocks = nn.ModuleList(Block() for _ in range(spec.n_layers))
        self.out = nn.Linear(h, spec.vocab, bias=False)
    def forward(self, ids):
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x)
        return self.out(x)

deepspeed.init_distributed(dist_backend="gloo")
torch.manual_seed(0)
model = Model()
if leaf:
    deepspeed.utils.set_z3_leaf_modules(model, [SparseMoeBlock])
mb = 1
""" + ENGINE + """fwd = []
for step in range(3):
    seen.update(fwd=0)
    x = torch.randint(0, spec.vocab, (1, 3))  # 3 tokens x top-2: at most 6 of the 16 experts run
    engine.backward(engine(x).float().mean())
    engine.step()
    fwd.append(seen["fwd"])
lay = Layout.from_plan(ExecutionPlan(dp=1, seq_len=3, micro_batch=1, sharding="zero3", stack="hf"))
planned = float(zero3.gathers(moe.dense_view(spec), lay, spec)["calls_fwd"][0])
json.dump({"fwd": fwd, "planned": planned}, open(sys.argv[2], "w"))
"""

TINY = dict(name="tiny-hf-moe", n_layers=2, hidden=64, n_heads=4, n_kv_heads=2, vocab=256, max_positions=64,
            position="rope", norm="rmsnorm", mlp="swiglu", bias=False, tied_embeddings=False, ffn_hidden=128,
            moe_experts=16, moe_top_k=2, moe_ffn_hidden=32)


def _run(tmp_path, mode: str) -> dict:
    return run_probe(_RUN, tmp_path / f"fetches-{mode}.json", json.dumps(TINY), mode)


@pytest.mark.slow
def test_hf_moe_block_as_a_zero3_leaf_is_one_fetch(tmp_path):
    got = _run(tmp_path, "leaf")
    # q, k, v, o and ONE fetch of the leaf MoE block (router + 16 experts) per layer, plus the embedding and the
    # output layer: 2 x 5 + 2, every step whatever the routing
    assert got["fwd"] == [12, 12, 12]
    assert got["planned"] == 12.0
    # without the leaf mark ZeRO-3 fetches per expert module that ran: more, and following the routing
    plain = _run(tmp_path, "plain")
    assert all(n > 12 + 2 * 3 for n in plain["fwd"])
