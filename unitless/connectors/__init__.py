"""Sources and sinks: files (and Kafka), parsing raw records into example blocks."""
