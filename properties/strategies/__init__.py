"""The suite's Hypothesis strategies, one import for every test:

    from properties import strategies as sts

Grouped by area in submodules (``attention``, ``kv``, ``argmax``, ...) and
re-exported here, so a strategy is written once and every area reuses it.
"""

from .quant import *  # noqa: F401,F403
from .kv import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .argmax import *  # noqa: F401,F403
from .decode import *  # noqa: F401,F403
from .paged import *  # noqa: F401,F403
from .merge import *  # noqa: F401,F403
