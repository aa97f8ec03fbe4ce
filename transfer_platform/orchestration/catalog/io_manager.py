"""A PySpark IO manager over the destinations.

- ``load_input``: a downstream asset that depends on ``<recipient>/<destination>/<model>``
  receives the table delivered there as a Spark DataFrame (read from that destination, not from
  the source).
- ``handle_output``: an asset that returns a Spark DataFrame has it delivered by a staged upsert
  into its destination, through the same writer (and the same rules: key, tie-break, watermark in
  the same commit) as a transfer. Dagster calls it once per step, so it records one window per
  step; the transfer assets themselves commit window by window in their body instead.

Asset metadata ``destination`` and ``model`` say where an asset's table lives.
"""


from datetime import UTC, datetime

from dagster import ConfigurableIOManager, InputContext, OutputContext
from dagster_pyspark import LazyPySparkResource

from transfer_platform.core.planning import ModelWindowing, windowing_for
from transfer_platform.core.timeutil import utc
from transfer_platform.core.windows import Window
from transfer_platform.destinations.base import WindowLoad
from transfer_platform.orchestration.catalog.resources import TransferPlatformResource


class DestinationIOManager(ConfigurableIOManager):
    platform: TransferPlatformResource
    pyspark: LazyPySparkResource

    def _target(self, definition_metadata: dict) -> tuple[str, str]:
        try:
            return definition_metadata["destination"], definition_metadata["model"]
        except KeyError:
            raise ValueError("assets handled by DestinationIOManager need metadata "
                             "'destination' and 'model'") from None

    def load_input(self, context: InputContext):
        upstream = context.upstream_output
        destination, model_name = self._target(dict(upstream.definition_metadata or {}))
        writer = self.platform.writer(destination)
        try:
            return writer.read_table(self.pyspark.spark_session, self.platform.config.model(model_name))
        finally:
            writer.close()

    def handle_output(self, context: OutputContext, obj) -> None:
        if obj is None:
            return
        destination, model_name = self._target(dict(context.definition_metadata or {}))
        config = self.platform.config
        model = config.model(model_name)
        windowing: ModelWindowing = windowing_for(config, destination, model)
        now = datetime.now(UTC)
        if context.has_asset_partitions:
            time_window = context.asset_partitions_time_window
            progress = Window(max(utc(time_window.start), windowing.configured_start), min(utc(time_window.end), now))
        else:
            progress = Window(windowing.configured_start, now)
        writer = self.platform.writer(destination)
        try:
            writer.prepare(model, context.run_id)
            result = writer.write_window(obj, WindowLoad(model=model, transfer_id=context.run_id,
                                                         progress=progress,
                                                         configured_start=windowing.configured_start))
        finally:
            writer.close()
        context.add_output_metadata({"rows_transferred": result.rows_transferred,
                                     "delta_rows_transferred": result.delta_rows_transferred})
