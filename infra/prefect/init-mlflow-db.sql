-- The MLflow server keeps its runs and registry in its own database on the Prefect Postgres.
CREATE DATABASE mlflow;
