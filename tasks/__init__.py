"""Prefect tasks: thin, retryable adapters around the stage libraries.

Each stage task takes paths, ids and a frozen Config; it reads its input artifacts, calls one
library function and writes its output under `<run_dir>/iter_<k>/`, returning the output's URL.
Stage tasks skip work whose manifest already records the same inputs (`tasks.store`) and are
cached by Prefect on the same key (`tasks.cache`). Retries happen only on infrastructure errors
(`tasks.errors`). The modules: `instances`, `rollout`, `validate`, `guidance`, `reward`,
`update`, `evaluate` (the stages), `tracking` (MLflow) and `report` (tracking tasks and Prefect
artifacts).
"""
