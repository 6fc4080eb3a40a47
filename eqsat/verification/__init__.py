"""Verification: a written program checked against the original in onnxruntime before anything is measured or
written (timing is :mod:`eqsat.measurement`'s).

The flow, for each candidate of a run:

1. **feeds** (:mod:`.feeds`): seeded random inputs at the user's shapes, integer ids drawn across the axis they
   index, masks alternated between kept and masked; the edge draws made from the first (rows of -inf, a NaN,
   values near the type's range); the masks as a server feeds them (:func:`.feeds.served`, for the timing);
2. **ties** (:mod:`.ties`): a draw on which the original's top-k choices are within rounding is drawn again;
3. **outputs** (:mod:`.outputs`): each output compared within the element type's tolerance, NaNs and infinities
   where the original's are (:func:`compare_outputs`), or within onnxruntime's own spread on the original
   (:class:`Spread`);
4. **check** (:mod:`.check`): the candidate at the representative shapes (:func:`verify`; :class:`Verifier` runs
   the original once for all of a run's candidates);
5. **shapes** (:mod:`.shapes`): a shape-generic candidate's interface, and its outputs at further sizes of each
   symbol (:func:`verify_shapes`, :class:`ShapesVerifier`);
6. **guards** (:mod:`.guards`): the else-branches of its table guards, beyond the tables (:func:`verify_guards`);
7. **spans** (:mod:`.spans`): the original a program written for a span of sizes carries beyond it
   (:func:`verify_within`).

A program that fails any of these is not written: the run returns the input.
"""

from __future__ import annotations

from .check import Verifier, feed_shapes, verify
from .guards import verify_guards
from .outputs import Spread, Verification, compare_outputs
from .shapes import ShapesCheck, ShapesVerifier, verify_shapes
from .spans import verify_within

__all__ = ["ShapesCheck", "ShapesVerifier", "Spread", "Verification", "Verifier", "compare_outputs", "feed_shapes",
           "verify", "verify_guards", "verify_shapes", "verify_within"]
