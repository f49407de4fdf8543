"""trainer/memory.py counts the storage under tensor wrappers: tensor parallelism's AsyncCollectiveTensor has no
storage of its own (data_ptr raises "invalid python storage"); its bytes are its inner tensor's."""

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from trainer.memory import StorageCounter, local_tensor, saved_tensor_meter


def _one_rank_group(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)


def test_async_collective_tensor_counts_its_inner_storage(tmp_path):
    _one_rank_group(tmp_path)
    try:
        x = torch.randn(16, 8)
        act = funcol.all_reduce(x, "sum", dist.group.WORLD)
        assert isinstance(act, funcol.AsyncCollectiveTensor)
        inner = local_tensor(act)
        assert type(inner) is torch.Tensor and inner.shape == (16, 8)
        assert StorageCounter().count([act]) == 16 * 8 * 4
        act.wait()

        w = torch.randn(8, 8, requires_grad=True)
        with saved_tensor_meter() as out:  # a norm-like op saves the wrapper (x.pow(2) saves its input)
            y = (funcol.all_reduce(x, "sum", dist.group.WORLD).pow(2) @ w).sum()
        y.backward()
        assert out["bytes"] >= 16 * 8 * 4 and out["tensors"] >= 1
    finally:
        dist.destroy_process_group()
