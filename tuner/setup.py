"""Open or create a tuning study: its storage, search space, measured system and predictor.

What the first worker measured (CPU peak, all-reduce bus bandwidth) and chose (the space, the
sequence length, steps per trial) is stored on the study, so that every later worker and every
resume predicts with the same System and searches the same space.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import optuna

from hardware.catalog import load_catalog
from planner.errors import PlanError
from planner.network import with_measured
from planner.model import ModelSpec
from planner.resolve import resolve_model, resolve_system, seq_len_of
from planner.scenario import Scenario
from planner.settings import Calibration, Settings
from planner.system import System
from tuner import device, proposals
from tuner.activity import STARTING, PhaseHook, measuring_line, no_phase
from tuner.config import TuneConfig
from tuner.network import measure_busbw
from tuner.predict import Predictor
from tuner.space import Space, build_space, ranked_parallel_choices
from tuner.storage import masked_url, open_storage
from tuner.study_setup import MEASURING, bench_step, setup_alive, setup_record, start_record, update_record
from tuner.study_store import META_KEY, StudyMeta, StudyStore, UnknownStudy, study_exists



@dataclass
class StudyContext:
    config: TuneConfig
    study: optuna.Study
    space: Space
    system: System
    base: Scenario
    predictor: Predictor
    nproc: int
    seq_len: int
    on_gpu: bool
    steps: int
    meta: StudyMeta
    store: StudyStore  # the study's records on its storage (tuner/study_store.py)
    spec: ModelSpec | None = None  # the model the trials train (what the DeepSpeed builder sizes)
    device_note: str | None = None  # why the trials run on CPU ranks on a machine that lists GPUs


def default_study_name(model: str, nproc: int, device_id: str, backend: str) -> str:
    return f"{Path(model).stem}-{nproc}x{device_id}-{backend}"


def local_device_count(on_gpu: bool) -> int:
    if on_gpu:
        return max(1, len(device.local_gpus()))
    return os.cpu_count() or 1


def _system_for(cfg: TuneConfig, nproc: int, on_gpu: bool, on_bench=None) -> tuple[System, str, System]:
    """The system the trials run on (on CPU a measured `cpu-rank` entry, on GPU the
    catalog's), its network note, and the same system with the catalog's assumed network
    instead of the measured bus bandwidth (to show what the measurement changed)."""
    catalog = load_catalog()
    busbw, note = measure_busbw(nproc, on_gpu=on_gpu, on_progress=on_bench) if cfg.measure_network \
        else (None, "not measured")
    if on_gpu:
        gpu_id = cfg.gpu
        if gpu_id is None and cfg.cluster is None:
            rows = device.local_gpus()
            gpu_id = device.guess_gpu_id(catalog, *rows[0]) if rows else None
            if gpu_id is None:
                seen = f"{rows[0][0]!r}, {rows[0][1]:.1f} GiB" if rows else "no name from nvidia-smi / amd-smi"
                raise PlanError("gpu", f"cannot tell which catalog GPU this is ({seen}); pass --gpu ID")
        scenario = Scenario(model=cfg.model, gpus=nproc, gpu=gpu_id, cluster=cfg.cluster)
        system = assumed = resolve_system(scenario, catalog)
        if cfg.device_memory_gib:
            system = assumed = system.model_copy(update={"gpu": system.gpu.model_copy(update={"hbm_gib": cfg.device_memory_gib})})
    else:
        peaks = device.cpu_peaks_tflops(nproc)
        scenario = Scenario(model=cfg.model, gpus=nproc, cluster=device.CPU_CLUSTER_ID)

        def cpu_system(bw):
            gpu, cluster = device.cpu_entries(nproc, device_memory_gib=cfg.device_memory_gib, busbw_gbps=bw,
                                              peaks_tflops=peaks)
            return resolve_system(scenario, device.with_entries(catalog, gpu, cluster))

        system = assumed = cpu_system(None)
        if busbw:  # the CPU entry's link is the plateau the measurement gives (planner/network.py)
            plateau = with_measured(assumed, busbw, busbw.get("readings") or {})[0].measured_intranode_busbw_gbps
            system = cpu_system(plateau)
    if busbw:
        system, said = with_measured(system, busbw, busbw.get("readings") or {})
        note = f"measured all-reduce busbw: {said}"
    return system, note, assumed


def open_study(cfg: TuneConfig, *, create: bool = True, on_phase: PhaseHook = no_phase) -> StudyContext:
    """Load the study named by `cfg` (or create it, measuring this machine once). A new study exists in the storage
    from the start, with a set-up record (tuner/study_setup.py) that the report shows while the network is measured;
    one whose set-up worker died (a kill -9 in the bench) is measured again here."""
    storage = open_storage(cfg.storage, heartbeat_interval_s=cfg.heartbeat_interval_s,
                           grace_period_s=cfg.grace_period_s)
    on_gpu, device_note = device.gpu_decision()  # GPUs the driver lists and torch here can use
    here = local_device_count(on_gpu)
    nproc = cfg.gpus or here
    if nproc > here:  # every trial runs on this machine: 64 CPU ranks on 2 cores ran a 64-rank bench for minutes
        kind = "GPUs" if on_gpu else "CPU cores"
        raise PlanError("gpus", f"{nproc} ranks, but this machine has {here} {kind} and every trial runs here; "
                        f"give --gpus {here} or fewer (a plan for more GPUs: plan estimate --gpus {nproc})")
    device_id = "gpu" if on_gpu else "cpu"
    name = cfg.study or default_study_name(cfg.model, nproc, device_id, cfg.backend)
    exists = study_exists(storage, name)
    if not exists and not create:
        raise PlanError("study", f"no study {name!r} in {masked_url(cfg.storage)}")
    store = StudyStore.open(storage, name, sampler=_sampler(cfg), create=not exists)
    meta = _set_up(cfg, store, nproc, on_gpu, on_phase) if META_KEY not in store.study.user_attrs else None
    meta = meta or StudyMeta.load(store.study)
    _check_same(cfg, meta, nproc)
    ctx = _context(cfg, store, meta)
    ctx.device_note = device_note
    return ctx


def _set_up(cfg: TuneConfig, store: StudyStore, nproc: int, on_gpu: bool, on_phase: PhaseHook) -> StudyMeta | None:
    """Measure this machine and save the StudyMeta of a study that has none yet: a new one, or one whose set-up
    stopped (its worker dead: measured again). While another live worker sets it up, wait for it (None: its
    StudyMeta is saved). A study with neither record was not made by `plan tune`."""
    study = store.study
    while True:
        rec = setup_record(study)
        if rec is not None:
            _check_same_setup(cfg, rec, nproc)
        if META_KEY in study.user_attrs:
            return None
        if rec is None and study.get_trials(deepcopy=False):
            raise UnknownStudy(f"{study.study_name!r} was not created by plan tune")
        if rec is None or not setup_alive(rec):
            break
        on_phase(STARTING, f"waiting for worker pid {rec.get('pid')} on {rec.get('host')}, which is setting the "
                           f"study up: {rec.get('doing')}")
        time.sleep(2.0)
        study = store.study = optuna.load_study(study_name=study.study_name, storage=store.storage,
                                                sampler=_sampler(cfg))
    mine = start_record(study, model=cfg.model, nproc=nproc, on_gpu=on_gpu, backend=cfg.backend, previous=rec)
    first = measuring_line(nproc, on_gpu, cfg.measure_network)
    phase = MEASURING if cfg.measure_network and nproc > 1 else "measuring this machine"
    if rec is not None:  # its earlier set-up stopped (a kill -9 in the bench): measured again, said so
        first, phase = "re-" + first, "re-" + phase
    update_record(study, mine, doing=first, phase=phase)
    on_phase(STARTING, first)

    def on_bench(step: dict | None) -> None:
        doing = f"{first}: {bench_step(step)}"
        update_record(study, mine, doing=doing, bench=step)
        on_phase(STARTING, doing)

    try:
        meta = _new_meta(cfg, nproc, on_gpu, on_bench)
    except KeyboardInterrupt as e:  # Ctrl-C / SIGTERM: the record says so (the worker is dead once it exits)
        which = "SIGTERM" if "Terminated" in type(e).__name__ else "Ctrl-C"
        update_record(study, mine, interrupted=f"stopped by {which}")
        raise
    except PlanError as e:  # a refused input (no such model, no GPU guess): a study made just now is not kept
        if rec is None and not study.get_trials(deepcopy=False):
            optuna.delete_study(study_name=study.study_name, storage=store.storage)
        else:
            update_record(study, mine, interrupted=f"refused: {e}"[:300])
        raise
    if META_KEY in study.user_attrs:  # another worker set it up in the meantime (both measured): keep the first
        return StudyMeta.load(study)
    meta.save(study)
    update_record(study, mine, phase="set up", doing="measured; trials next")
    return meta


def _check_same_setup(cfg: TuneConfig, rec: dict, nproc: int) -> None:
    """A resume of a study still being set up names its model and ranks (what _check_same checks once it is)."""
    if rec.get("model") != cfg.model:
        raise PlanError("study", f"was created for model {rec.get('model')!r}, not {cfg.model!r}; use another --study")
    if cfg.gpus is not None and rec.get("nproc") != nproc:
        raise PlanError("study", f"was created for {rec.get('nproc')} ranks, not {nproc}; use another --study")


def _new_meta(cfg: TuneConfig, nproc: int, on_gpu: bool, on_bench=None) -> StudyMeta:
    spec = resolve_model(Scenario(model=cfg.model))
    seq_len = cfg.seq_len or min(seq_len_of(Scenario(model=cfg.model), spec), 2048)
    system, note, assumed = _system_for(cfg, nproc, on_gpu, on_bench)
    parallel = ranked_parallel_choices(Scenario(model=cfg.model, gpus=nproc, seq_len=seq_len), system,
                                       _settings_for(on_gpu))
    space = build_space(cfg.backend, on_gpu=on_gpu, overrides=cfg.choices,
                        global_batch=cfg.global_batch, dp=nproc, parallel=parallel,
                        bf16=system.gpu.bf16_tflops is not None)  # a V100 runs no bf16 (trainer/dist.py)
    calibration = _initial_calibration(cfg)
    settings = _settings_for(on_gpu)
    base = Scenario(model=cfg.model, gpus=nproc, seq_len=seq_len, global_batch=cfg.global_batch)
    top = proposals.planner_top_k(base, system, settings, space.choices, cfg.top_k, global_batch=cfg.global_batch)
    effect = proposals.network_effect(base, system, assumed, settings, space.choices, cfg.global_batch)
    return StudyMeta(
        model=cfg.model, nproc=nproc, on_gpu=on_gpu, backend=cfg.backend, seq_len=seq_len, steps=cfg.steps,
        warmup_steps=cfg.warmup_steps, global_batch=cfg.global_batch, device_memory_gib=cfg.device_memory_gib,
        space={k: list(v) for k, v in space.choices.items()}, system=system, network_note=note,
        network_effect=effect, planner_top_k=top, calibration=calibration, settings=settings)


def _settings_for(on_gpu: bool) -> Settings:
    """On CPU ranks there is no CUDA context: a rank's fixed cost is its Python + torch +
    gloo process. The per-rank cap is on address space (RLIMIT_AS), and a tiny-model DDP rank
    needed 0.75-0.85 GiB of it here (0.45 GiB resident), so 0.8 GiB, not a GPU's 1.5 GiB."""
    return Settings() if on_gpu else Settings(runtime_overhead_gib=0.8, fragmentation_margin=0.05,
                                              host_overhead_gib_per_rank=0.8)


def _initial_calibration(cfg: TuneConfig) -> Calibration:
    if not cfg.calibration_in:
        return Calibration()
    try:
        return Calibration.model_validate_json(Path(cfg.calibration_in).read_text())
    except FileNotFoundError:
        raise PlanError("calibration", f"{cfg.calibration_in}: file not found") from None
    except OSError as e:  # a folder, no permission
        raise PlanError("calibration", f"cannot read {cfg.calibration_in}: {e.strerror or e}") from None
    except ValueError as e:
        raise PlanError("calibration", f"{cfg.calibration_in}: not a Calibration JSON ({str(e).splitlines()[0]})") from None


def _check_same(cfg: TuneConfig, meta: StudyMeta, nproc: int) -> None:
    if meta.model != cfg.model:
        raise PlanError("study", f"was created for model {meta.model!r}, not {cfg.model!r}; use another --study")
    if cfg.gpus is not None and meta.nproc != nproc:
        raise PlanError("study", f"was created for {meta.nproc} ranks, not {nproc}; use another --study")
    # options that only shape a new study: on a resume they were ignored without a word
    differs = [(opt, given, kept) for opt, given, kept in (
        ("--seq-len", cfg.seq_len, meta.seq_len), ("--global-batch", cfg.global_batch, meta.global_batch),
        ("--backend", None if cfg.backend == "any" else cfg.backend, meta.backend)) if given is not None and given != kept]
    if differs:
        opt, given, kept = differs[0]
        made = f"without {opt}" if kept is None else f"with {opt} {kept}"
        raise PlanError("study", f"{meta_name(meta, cfg)} was created {made}, not {opt} {given}; resume it "
                        f"without {opt}, or use another --study")
    if cfg.calibration_in:
        raise PlanError("calibration", f"{cfg.calibration_in}: study {meta_name(meta, cfg)} exists and keeps its own "
                        "calibration (refined by its trials); --calibration starts a new study: use another --study")


def meta_name(meta: StudyMeta, cfg: TuneConfig) -> str:
    return cfg.study or default_study_name(meta.model, meta.nproc, "gpu" if meta.on_gpu else "cpu", meta.backend)


def _sampler(cfg: TuneConfig) -> optuna.samplers.BaseSampler:
    if cfg.sampler == "random":
        return optuna.samplers.RandomSampler(seed=cfg.seed)
    # constant_liar: parallel workers do not all pick the point another one is running
    return optuna.samplers.TPESampler(seed=cfg.seed, n_startup_trials=3, multivariate=True,
                                      constant_liar=True)


def _context(cfg: TuneConfig, store: StudyStore, meta: StudyMeta) -> StudyContext:
    if not meta.space:
        raise PlanError("study", f"{store.study.study_name!r} stores no search space: it cannot be resumed")
    base = meta.base()
    return StudyContext(config=cfg, study=store.study, store=store, space=Space(choices=meta.choices),
                        system=meta.system, base=base, predictor=meta.predictor(), nproc=meta.nproc,
                        seq_len=meta.seq_len, on_gpu=meta.on_gpu, steps=meta.steps, meta=meta,
                        spec=resolve_model(base))


def export_calibration(cal: Calibration, path: str | None) -> None:
    """Write the calibration as JSON (--calibration-out; what --calibration-in reads)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(cal.model_dump(mode="json"), indent=2) + "\n")
