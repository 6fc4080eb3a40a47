"""The runtimes (eqsat.measurement.runtimes) and the torch executor (eqsat.measurement.torch_run), checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_builders as ob
import pytest
import torch
from onnx import TensorProto, helper
from timing_cases import busy
from torch_check import torch_outputs

from eqsat.app.cli import main
from eqsat.app.config import OptimizeConfig
from eqsat.app.pipeline import optimize
from eqsat.errors import InputError
from eqsat.measurement.runtimes import OrtRuntime, Program, check_available, compare_programs, make, resolve
from eqsat.measurement.timing import Protocol, compare_many
from eqsat.measurement.torch_run import TorchProgram, UnsupportedProgram
from eqsat.models import BENCHMARKS, build
from eqsat.onnx import export_model, import_model
from eqsat.onnx.io import session
from eqsat.verification import compare_outputs
from eqsat.verification.feeds import random_inputs

GPU = torch.cuda.is_available()


def _ort_outputs(model: onnx.ModelProto, seed: int = 0) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    s = session(model)
    feeds = random_inputs(s, np.random.default_rng(seed))
    return feeds, [np.asarray(o) for o in s.run(None, feeds)]


def _assert_same(ref: list[np.ndarray], got: list[np.ndarray]) -> None:
    assert len(ref) == len(got)
    for a, b in zip(ref, got):
        ok, max_abs, _ = compare_outputs(a, b)
        assert ok, f"max abs error {max_abs}"


@pytest.mark.parametrize("name", ["squeezenet", "bert", "nasrnn", "resnext50", "mobilenetv2"])
def test_torch_executor_matches_onnxruntime_on_builtin_models(name):
    graph = build(name, small=True)
    feeds, ref = _ort_outputs(export_model(graph))
    _assert_same(ref, torch_outputs(TorchProgram(graph), feeds))


@pytest.mark.parametrize("builder", [ob.residual_block, ob.mlp, ob.attention])
def test_torch_executor_matches_onnxruntime_on_imported_models(builder):
    model = builder()
    feeds, ref = _ort_outputs(model, seed=3)  # the original ONNX model in onnxruntime: an independent oracle
    _assert_same(ref, torch_outputs(TorchProgram(import_model(model)), feeds))


def test_replicas_compute_the_same_and_hold_their_own_weights():
    graph = build("squeezenet", small=True)
    prog = TorchProgram(graph)
    copy = prog.replica()
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(prog.constants, copy.constants))
    feeds, ref = _ort_outputs(export_model(graph))
    _assert_same(ref, torch_outputs(copy, feeds))


def _opaque_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    return ob.model([helper.make_node("Erf", ["x"], ["e"]), helper.make_node("Relu", ["e"], ["y"])], [x], [y], [])


def test_opaque_operators_are_refused_by_the_torch_runtimes_with_what_to_use():
    graph = import_model(_opaque_model())
    with pytest.raises(UnsupportedProgram, match=r"Erf.*--runtime ort-cpu"):
        TorchProgram(graph)
    with pytest.raises(InputError, match="Erf"):  # before any search
        optimize(_opaque_model(), OptimizeConfig.of(runtime="torch-cpu", cost="analytic", budget=1))


def test_the_same_opaque_model_runs_in_ort_cpu():
    r = optimize(_opaque_model(), OptimizeConfig.of(runtime="ort-cpu", cost="analytic", scheduler="none",
                                                    allow_slower=True, measure_budget=0.2))
    assert r.report.measured is not None and r.report.measured.runtime["name"] == "ort-cpu"


def test_the_pipeline_measures_in_the_runtime_it_is_given():
    r = optimize(ob.residual_block(), OptimizeConfig.of(runtime="torch-cpu", cost="analytic", budget=2, candidates=2,
                                                        allow_slower=True, measure_budget=0.3))
    m = r.report.to_json()["measured"]
    assert m["runtime"]["name"] == "torch-cpu" and m["runtime"]["torch"] == torch.__version__
    assert m["candidate"] in {c.name for c in r.report.candidates} and m["original_ms"] > 0


def test_runtime_run_matches_onnxruntime_in_each_cpu_runtime():
    graph = build("squeezenet", small=True)
    model = export_model(graph)
    feeds, ref = _ort_outputs(model)
    for name in ("ort-cpu", "torch-cpu"):
        _assert_same(ref, make(name).run(Program(model, graph), feeds))
    _assert_same(ref, OrtRuntime("ort-cpu", bind_device="cpu").run(Program(model, graph), feeds))  # ort-cuda's path


def test_io_binding_calls_rerun_the_model_and_are_timed():
    """The I/O-bound call (what ort-cuda times) recomputes each time: new inputs bound in place change the outputs."""
    graph = build("squeezenet", small=True)
    model = export_model(graph)
    feeds, ref = _ort_outputs(model)
    runtime = OrtRuntime("ort-cpu", bind_device="cpu")
    (calls,) = runtime.instances([Program(model, graph)], feeds, Protocol(sessions=1))
    call = calls[0]
    _assert_same(ref, [o.numpy() for o in call()])
    name, value = next(iter(feeds.items()))
    call.inputs[name].update_inplace(np.zeros_like(value))  # the bound buffer: the next call must read it
    zeroed = {**feeds, name: np.zeros_like(value)}
    _assert_same(session(model).run(None, zeroed), [o.numpy() for o in call()])
    assert runtime.info()["io_binding"] == "cpu"
    measured = compare_programs(Program(model, graph), [Program(model, graph)], runtime,
                                Protocol(budget_s=0.3, min_rounds=4))
    assert measured.comparisons[0].ci_low <= measured.comparisons[0].speedup <= measured.comparisons[0].ci_high


@pytest.mark.timing
def test_compare_many_orders_programs_of_known_latency():
    """One interleaved run of three programs: the comparisons pair each with the original (1 ms)."""
    slower, faster = compare_many([busy(1.0), busy(2.0), busy(0.5)], Protocol(budget_s=0.6, min_rounds=5))
    assert slower.ci_high < 1 < faster.ci_low  # 2x apart: clear even on a busy machine (which stretches busy waits)
    assert slower.ci_low <= slower.speedup <= slower.ci_high and faster.ci_low <= faster.speedup <= faster.ci_high
    assert slower.round_original_ms == faster.round_original_ms  # the same original blocks, paired round by round


def test_compare_programs_in_torch_cpu_reports_the_runtime():
    graph = build("squeezenet", small=True)
    p = Program(export_model(graph), graph)
    measured = compare_programs(p, [p], make("torch-cpu"), Protocol(budget_s=0.3, min_rounds=4))
    (cmp,) = measured.comparisons
    assert cmp.runtime["name"] == "torch-cpu" and cmp.runtime["mode"] == "eager"
    assert cmp.ci_low <= cmp.speedup <= cmp.ci_high and measured.beside == {}


def test_auto_is_ort_cpu_without_a_gpu_and_torch_cuda_with_one():
    assert resolve("auto") == ("torch-cuda" if GPU else "ort-cpu")
    assert resolve("ort-cuda") == "ort-cuda"


@pytest.mark.parametrize("argv, message", [
    (["--runtime", "tpu"], r"--runtime 'tpu': choose one of auto, ort-cpu, torch-cuda, torch-compile, ort-cuda"),
    (["--runtime", "ort-cuda"], r"--runtime ort-cuda: .*install onnxruntime-gpu"),
])
def test_cli_refuses_an_unusable_runtime_up_front(tmp_path, capsys, argv, message):
    import re

    import onnxruntime as ort

    if "ort-cuda" in argv and "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("onnxruntime-gpu is installed here: ort-cuda is usable")
    code = main(["optimize-model", "--model", "squeezenet", "--small", "-o", str(tmp_path / "o.onnx"), *argv])
    assert code == 2 and re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "o.onnx").exists()


@pytest.mark.skipif(GPU, reason="torch sees a GPU here: torch-cuda is usable")
def test_cli_refuses_torch_cuda_without_a_gpu(tmp_path, capsys):
    code = main(["optimize-model", "--model", "squeezenet", "--small", "-o", str(tmp_path / "o.onnx"),
                 "--runtime", "torch-cuda"])
    err = capsys.readouterr().err
    assert code == 2 and "--runtime torch-cuda: torch sees no GPU" in err and "--runtime ort-cpu" in err


def test_no_measure_needs_no_runtime():
    OptimizeConfig.of(runtime="ort-cuda", measure=False).validate()
    with pytest.raises(InputError, match="--runtime"):
        check_available("bogus")


@pytest.mark.skipif(not GPU, reason="the CUDA-graph capture needs a GPU; torch sees none")
def test_torch_cuda_replays_a_cuda_graph_that_matches_onnxruntime():
    graph = build("squeezenet", small=True)
    model = export_model(graph)
    feeds, ref = _ort_outputs(model)
    runtime = make("torch-cuda")
    _assert_same(ref, runtime.run(Program(model, graph), feeds))
    p = Program(model, graph)
    measured = compare_programs(p, [p], runtime, Protocol(budget_s=0.5))
    assert measured.comparisons[0].runtime["clock"] == "cuda events"
    assert len(measured.beside["eager_ms"]) == 2 and min(measured.beside["eager_ms"]) > 0


@pytest.mark.skipif(not GPU, reason="the CUDA-graph capture needs a GPU; torch sees none")
def test_a_replay_holds_the_weights_and_inputs_its_graph_reads():
    """A replica's weights and the inputs are referenced by nothing but its replay: freed, the graph read memory
    handed to others (NaN-filled here) or given back (an illegal address, as the pipeline's run hit)."""
    import gc

    graph = build("squeezenet", small=True)
    model = export_model(graph)
    feeds, ref = _ort_outputs(model)
    call = make("torch-cuda").instances([Program(model, graph)], feeds, Protocol(sessions=2))[0][-1]
    gc.collect()
    torch.cuda.empty_cache()
    junk = torch.full((1 << 26,), float("nan"), device="cuda")
    _assert_same(ref, [o.detach().cpu().numpy() for o in call()])
    del junk


@pytest.mark.skipif(not GPU, reason="the CUDA-graph capture needs a GPU; torch sees none")
@pytest.mark.parametrize("name", BENCHMARKS)
def test_torch_cuda_captures_every_builtin_model_as_onnxruntime_computes_it(name):
    graph = build(name, small=True)
    model = export_model(graph)
    feeds, ref = _ort_outputs(model)  # onnxruntime on the CPU: an evaluator independent of torch
    _assert_same(ref, make("torch-cuda").run(Program(model, graph), feeds))


@pytest.mark.slow
def test_torch_compile_on_the_cpu_matches_onnxruntime():
    """torch.compile (inductor, mode "default" on the CPU) of an imported MLP; compiling takes seconds."""
    model = ob.mlp()
    graph = import_model(model)
    feeds, ref = _ort_outputs(model)
    runtime = make("torch-compile")
    assert runtime.info()["compile_mode"] == ("reduce-overhead" if GPU else "default")
    _assert_same(ref, runtime.run(Program(model, graph), feeds))
