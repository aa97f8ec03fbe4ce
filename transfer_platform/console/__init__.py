"""What the command line shows while it works: progress on stderr, and the output of the child
processes it starts (a local Spark's JVM, Dagster's code server) kept off stdout and the terminal."""
