"""The lesion study (Veit et al. 2016, section 4; Lad et al. 2024): blocks deleted, swapped
and reordered at test time, measured, tabled, drawn, and followed through training.
"""

from resgrad.lab.lesion.figs import (  # noqa: F401
    lesion_figure,
    save_lesion_figure,
)
from resgrad.lab.lesion.interventions import (  # noqa: F401
    BLOCK_OVERHEAD_S,
    EXACT_SETS,
    KINDS,
    LESSON_KINDS,
    LESSON_LAYER_S,
    MAX_LESIONS,
    MAX_SAMPLES,
    MAX_SEED,
    RANDOM,
    Cost,
    Lesion,
    balanced_sets,
    delete_blocks,
    delete_branch,
    deletion_sets,
    intact,
    lesson_cost,
    model_cost,
    pair_sets,
    plan,
    population,
    progress_bar,
    require_time,
    swap_blocks,
)
from resgrad.lab.lesion.measure import (  # noqa: F401
    LESSON_METRICS,
    METRICS,
    Reference,
    StudyResult,
    Tick,
    lesion_bytes,
    lesioned_logits,
    lesson_study,
    metrics,
    model_study,
    reference,
    title,
)
from resgrad.lab.lesion.runs import (  # noqa: F401
    CheckpointLesions,
    across_checkpoints,
    run_checkpoint_lesions,
)
from resgrad.lab.lesion.study import (  # noqa: F401
    CKPT_KEYS,
    HEADS,
    LESSON_SEEDS,
    MODEL_SEEDS,
    MORE,
    SUMMARY_HEAD,
    LesionStudy,
    across_models,
    lesson_lesions,
    render,
    render_every_checkpoint,
    result_rows,
    runs_title,
    table_text,
    text_name,
)
from resgrad.lab.lesion.tables import (  # noqa: F401
    LesionRow,
    Summary,
    across_runs,
    row_keys,
    rows,
    sampled_mean,
    summary,
)
