# orchestration/'s modules moved into sub-packages (issue 57): apply with
#   git ls-files -z | xargs -0 grep -lIZE 'orchestration' | xargs -0 sed -i -f moves.sed
#   then: ruff check --fix --select I001 transfer_platform transfer_platform_tests benchmarks (import order)
# Each move: the dotted module path, `from transfer_platform.orchestration import <module>`, and
# the file path (orchestration/<module>.py). Idempotent: a moved path matches no line again.
# speed/
s/transfer_platform\.orchestration\.dagster_internals\b/transfer_platform.orchestration.speed.dagster_internals/g
s/from transfer_platform\.orchestration import dagster_internals\b/from transfer_platform.orchestration.speed import dagster_internals/g
s/orchestration\/dagster_internals\.py/orchestration\/speed\/dagster_internals.py/g
s/transfer_platform\.orchestration\.dagster_fixes\b/transfer_platform.orchestration.speed.dagster_fixes/g
s/from transfer_platform\.orchestration import dagster_fixes\b/from transfer_platform.orchestration.speed import dagster_fixes/g
s/orchestration\/dagster_fixes\.py/orchestration\/speed\/dagster_fixes.py/g
s/transfer_platform\.orchestration\.launcher\b/transfer_platform.orchestration.speed.launcher/g
s/from transfer_platform\.orchestration import launcher\b/from transfer_platform.orchestration.speed import launcher/g
s/orchestration\/launcher\.py/orchestration\/speed\/launcher.py/g
s/transfer_platform\.orchestration\.run_worker\b/transfer_platform.orchestration.speed.run_worker/g
s/from transfer_platform\.orchestration import run_worker\b/from transfer_platform.orchestration.speed import run_worker/g
s/orchestration\/run_worker\.py/orchestration\/speed\/run_worker.py/g
s/transfer_platform\.orchestration\.queue_wake\b/transfer_platform.orchestration.speed.queue_wake/g
s/from transfer_platform\.orchestration import queue_wake\b/from transfer_platform.orchestration.speed import queue_wake/g
s/orchestration\/queue_wake\.py/orchestration\/speed\/queue_wake.py/g
s/transfer_platform\.orchestration\.compute_logs\b/transfer_platform.orchestration.speed.compute_logs/g
s/from transfer_platform\.orchestration import compute_logs\b/from transfer_platform.orchestration.speed import compute_logs/g
s/orchestration\/compute_logs\.py/orchestration\/speed\/compute_logs.py/g
# catalog/
s/transfer_platform\.orchestration\.assets\b/transfer_platform.orchestration.catalog.assets/g
s/from transfer_platform\.orchestration import assets\b/from transfer_platform.orchestration.catalog import assets/g
s/orchestration\/assets\.py/orchestration\/catalog\/assets.py/g
s/transfer_platform\.orchestration\.checks\b/transfer_platform.orchestration.catalog.checks/g
s/from transfer_platform\.orchestration import checks\b/from transfer_platform.orchestration.catalog import checks/g
s/orchestration\/checks\.py/orchestration\/catalog\/checks.py/g
s/transfer_platform\.orchestration\.keys\b/transfer_platform.orchestration.catalog.keys/g
s/from transfer_platform\.orchestration import keys\b/from transfer_platform.orchestration.catalog import keys/g
s/orchestration\/keys\.py/orchestration\/catalog\/keys.py/g
s/transfer_platform\.orchestration\.partitions\b/transfer_platform.orchestration.catalog.partitions/g
s/from transfer_platform\.orchestration import partitions\b/from transfer_platform.orchestration.catalog import partitions/g
s/orchestration\/partitions\.py/orchestration\/catalog\/partitions.py/g
s/transfer_platform\.orchestration\.last_transfer\b/transfer_platform.orchestration.catalog.last_transfer/g
s/from transfer_platform\.orchestration import last_transfer\b/from transfer_platform.orchestration.catalog import last_transfer/g
s/orchestration\/last_transfer\.py/orchestration\/catalog\/last_transfer.py/g
s/transfer_platform\.orchestration\.io_manager\b/transfer_platform.orchestration.catalog.io_manager/g
s/from transfer_platform\.orchestration import io_manager\b/from transfer_platform.orchestration.catalog import io_manager/g
s/orchestration\/io_manager\.py/orchestration\/catalog\/io_manager.py/g
s/transfer_platform\.orchestration\.reporting\b/transfer_platform.orchestration.catalog.reporting/g
s/from transfer_platform\.orchestration import reporting\b/from transfer_platform.orchestration.catalog import reporting/g
s/orchestration\/reporting\.py/orchestration\/catalog\/reporting.py/g
s/transfer_platform\.orchestration\.resources\b/transfer_platform.orchestration.catalog.resources/g
s/from transfer_platform\.orchestration import resources\b/from transfer_platform.orchestration.catalog import resources/g
s/orchestration\/resources\.py/orchestration\/catalog\/resources.py/g
# jobs/
s/transfer_platform\.orchestration\.transfer_job\b/transfer_platform.orchestration.jobs.transfer_job/g
s/from transfer_platform\.orchestration import transfer_job\b/from transfer_platform.orchestration.jobs import transfer_job/g
s/orchestration\/transfer_job\.py/orchestration\/jobs\/transfer_job.py/g
s/transfer_platform\.orchestration\.connection_test_job\b/transfer_platform.orchestration.jobs.connection_test_job/g
s/from transfer_platform\.orchestration import connection_test_job\b/from transfer_platform.orchestration.jobs import connection_test_job/g
s/orchestration\/connection_test_job\.py/orchestration\/jobs\/connection_test_job.py/g
s/transfer_platform\.orchestration\.delete_sweep_job\b/transfer_platform.orchestration.jobs.delete_sweep_job/g
s/from transfer_platform\.orchestration import delete_sweep_job\b/from transfer_platform.orchestration.jobs import delete_sweep_job/g
s/orchestration\/delete_sweep_job\.py/orchestration\/jobs\/delete_sweep_job.py/g
# scheduling/
s/transfer_platform\.orchestration\.sensors\b/transfer_platform.orchestration.scheduling.sensors/g
s/from transfer_platform\.orchestration import sensors\b/from transfer_platform.orchestration.scheduling import sensors/g
s/orchestration\/sensors\.py/orchestration\/scheduling\/sensors.py/g
s/transfer_platform\.orchestration\.coordinator\b/transfer_platform.orchestration.scheduling.coordinator/g
s/from transfer_platform\.orchestration import coordinator\b/from transfer_platform.orchestration.scheduling import coordinator/g
s/orchestration\/coordinator\.py/orchestration\/scheduling\/coordinator.py/g
s/transfer_platform\.orchestration\.budget\b/transfer_platform.orchestration.scheduling.budget/g
s/from transfer_platform\.orchestration import budget\b/from transfer_platform.orchestration.scheduling import budget/g
s/orchestration\/budget\.py/orchestration\/scheduling\/budget.py/g
s/transfer_platform\.orchestration\.repair\b/transfer_platform.orchestration.scheduling.repair/g
s/from transfer_platform\.orchestration import repair\b/from transfer_platform.orchestration.scheduling import repair/g
s/orchestration\/repair\.py/orchestration\/scheduling\/repair.py/g
s/transfer_platform\.orchestration\.run_tags\b/transfer_platform.orchestration.scheduling.run_tags/g
s/from transfer_platform\.orchestration import run_tags\b/from transfer_platform.orchestration.scheduling import run_tags/g
s/orchestration\/run_tags\.py/orchestration\/scheduling\/run_tags.py/g
s/transfer_platform\.orchestration\.config_stamp\b/transfer_platform.orchestration.scheduling.config_stamp/g
s/from transfer_platform\.orchestration import config_stamp\b/from transfer_platform.orchestration.scheduling import config_stamp/g
s/orchestration\/config_stamp\.py/orchestration\/scheduling\/config_stamp.py/g
# runs/
s/transfer_platform\.orchestration\.lifecycle\b/transfer_platform.orchestration.runs.lifecycle/g
s/from transfer_platform\.orchestration import lifecycle\b/from transfer_platform.orchestration.runs import lifecycle/g
s/orchestration\/lifecycle\.py/orchestration\/runs\/lifecycle.py/g
s/transfer_platform\.orchestration\.transfers\b/transfer_platform.orchestration.runs.transfers/g
s/from transfer_platform\.orchestration import transfers\b/from transfer_platform.orchestration.runs import transfers/g
s/orchestration\/transfers\.py/orchestration\/runs\/transfers.py/g
s/transfer_platform\.orchestration\.workspaces\b/transfer_platform.orchestration.runs.workspaces/g
s/from transfer_platform\.orchestration import workspaces\b/from transfer_platform.orchestration.runs import workspaces/g
s/orchestration\/workspaces\.py/orchestration\/runs\/workspaces.py/g
# instance/
s/transfer_platform\.orchestration\.sqlite_storage\b/transfer_platform.orchestration.instance.sqlite_storage/g
s/from transfer_platform\.orchestration import sqlite_storage\b/from transfer_platform.orchestration.instance import sqlite_storage/g
s/orchestration\/sqlite_storage\.py/orchestration\/instance\/sqlite_storage.py/g
s/transfer_platform\.orchestration\.retention\b/transfer_platform.orchestration.instance.retention/g
s/from transfer_platform\.orchestration import retention\b/from transfer_platform.orchestration.instance import retention/g
s/orchestration\/retention\.py/orchestration\/instance\/retention.py/g
