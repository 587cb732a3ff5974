"""Training experiments: grids of flow profiles (sweep), of training runs (experiment,
depth-train), the papers' claims, and runs compared side by side.
"""

from resgrad.lab.experiments.claims import (  # noqa: F401
    CLAIMS,
    ClaimRow,
    claim_table,
    format_claims,
    seeds_text,
    stream_growth,
    update_size,
)
from resgrad.lab.experiments.compare import (  # noqa: F401
    QUANTITIES,
    RUN_LABEL_WIDTH,
    compare_figure,
    default_layers,
    dynamics_figure,
    run_labels,
)
from resgrad.lab.experiments.depthtrain import (  # noqa: F401
    DepthTrainConfig,
    depth_train,
)
from resgrad.lab.experiments.experiment import (  # noqa: F401
    ABOUT,
    EXPERIMENTS,
    GROUP,
    ExperimentConfig,
    cell_key,
    format_summary,
    render_figure,
    run_cell,
    run_experiment,
    summarize,
)
from resgrad.lab.experiments.grid import (  # noqa: F401
    BACKENDS,
    GridResult,
    check_backend,
    run_grid,
    sidecar_is_empty,
    sidecar_path,
)
from resgrad.lab.experiments.sweep import (  # noqa: F401
    MAX_GRID,
    OUT_FORMATS,
    ROW_FIELDS,
    SweepConfig,
    SweepResult,
    check_grid_size,
    point_key,
    require_memory,
    rows_to_csv,
    rows_to_json,
    run_point,
    run_sweep,
    sweep_plot_spec,
)
