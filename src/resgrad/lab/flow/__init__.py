"""Gradient flow layer by layer: stacks of every residual scheme at initialization, a
trained model on real text, and the explorer's grids.
"""

from resgrad.lab.flow.core import (  # noqa: F401
    LESSON_VARIANTS,
    LOSSES,
    QUANTITIES,
    RECORD_FIELDS,
    FlowConfig,
    FlowRecord,
    Profile,
    aggregate,
    all_variants,
    measure,
    positive_ints,
    profile,
    seed_tuple,
)
from resgrad.lab.flow.explore import (  # noqa: F401
    explore_figure,
    explore_grid,
    explore_records,
    explore_spec,
    gained_params,
)
from resgrad.lab.flow.pretrained import (  # noqa: F401
    measure_model,
)
from resgrad.lab.flow.report import (  # noqa: F401
    PRETRAINED,
    LessonLayerRow,
    describe,
    flow_plot_spec,
    format_records,
    lesson_per_layer,
    lesson_per_layer_text,
    lesson_plot_spec,
    records_to_csv,
    records_to_json,
)
from resgrad.lab.flow.study import (  # noqa: F401
    KEYS,
    MORE,
    PASS_OVERHEAD_S,
    FlowCost,
    FlowStudy,
    FlowSummary,
    measure_stacks,
    render_every_checkpoint,
    render_records,
    summary,
)
