"""The shared pieces of every study of a model: its cost and budget, the text windows it
reads, the runs it compares, and the protocol that follows it through checkpoints and
across runs.
"""

from resgrad.lab.study.budget import (  # noqa: F401
    FLOPS_PER_S,
    GPT_VJP_OVERHEAD_S,
    LESSON_VJP_OVERHEAD_S,
    PROGRESS_AFTER_S,
    TIME_BUDGET_S,
    Work,
    bar,
    format_seconds,
    lesson_work,
    model_work,
    refuse_over_budget,
    require_time,
    work_bar,
)
from resgrad.lab.study.protocol import (  # noqa: F401
    Checkpoint,
    Model,
    Step,
    Study,
    Tick,
    across_runs,
    common_steps,
    every_checkpoint,
    refuse_repeated,
    refuse_twice,
    run_names,
)
from resgrad.lab.study.runs import (  # noqa: F401
    FIELD_NAMES,
    RunModel,
    RunPlan,
    check_comparable,
    describe_model,
    plan_runs,
    run_model,
)
from resgrad.lab.study.windows import (  # noqa: F401
    check_seq,
    refuse_long_seq,
    text_windows,
)
