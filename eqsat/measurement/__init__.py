"""Measurement: how a candidate program is timed end to end against the original and whether it ships.

The flow, bottom up:

* :mod:`~eqsat.measurement.clock`: the clocks and the onnxruntime session settings every timing shares (the operator
  cost models of :mod:`eqsat.cost` time with them too);
* :mod:`~eqsat.measurement.grouping`: how many timed sessions fit the memory budget, and the groups they are timed in;
* :mod:`~eqsat.measurement.gate`: the sequential shipping gate (trimmed paired log ratios, cluster-robust t, looks
  planned from a pilot), whose false-ship rate is designed;
* :mod:`~eqsat.measurement.timing`: the interleaved protocol (sessions used in turn, rounds in a seeded random
  order, the speedup and its interval);
* :mod:`~eqsat.measurement.runtimes`: the runtimes a program is timed in (onnxruntime on the CPU or a GPU, torch
  eager, compiled or captured), one interface;
* :mod:`~eqsat.measurement.torch_run`: the IR run by torch (optional: the ``torch`` extra);
* :mod:`~eqsat.measurement.decision`: the one owner of the measurement policy and the ship decision: which
  candidates are timed together, the budget and its extension, :func:`~eqsat.measurement.decision.choose` among
  the candidates, and which program the run returns.

The package sits on the ground floor (the IR, the ONNX layer, verification); nothing here searches or extracts.
"""
