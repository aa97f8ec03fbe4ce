"""The Snowflake destination: its SQL (:mod:`.dialect`), connection (:mod:`.connect`) and writer."""
