"""The gradient split by path length (Veit et al. 2016): the exact split, its chains, single
paths and Veit's sampling of them, its figures, and the split through training and across runs.
"""

from resgrad.lab.paths.chains import (  # noqa: F401
    ACTIVATIONS,
    Chain,
    Step,
    gpt_chain,
    stack_chain,
)
from resgrad.lab.paths.exact import (  # noqa: F401
    MAX_SPLIT_BRANCHES,
    PathRow,
    PathSplit,
    Tick,
    effective_range,
    model_splits,
    path_table,
    paths_in_range,
    split,
)
from resgrad.lab.paths.figs import (  # noqa: F401
    HEAT_FLOOR,
    path_figure,
    save_path_figure,
)
from resgrad.lab.paths.runs import (  # noqa: F401
    CheckpointPaths,
    RunsRow,
    across_runs,
)
from resgrad.lab.paths.study import (  # noqa: F401
    CKPT_KEYS,
    LESSON_SEEDS,
    MODEL_SEEDS,
    MORE,
    ROW_KEYS,
    PathsResult,
    PathsStudy,
    checkpoint_paths,
    lesson_paths,
    render,
    render_every_checkpoint,
    render_runs,
    run_checkpoint_paths,
    through_training,
)
from resgrad.lab.paths.veit import (  # noqa: F401
    MAX_EXACT_PATHS,
    VeitEstimate,
    model_veit,
    path_gradient,
    veit_bytes,
    veit_exact,
    veit_sample,
)
