"""What the tests share: running the command, examples and records, runners, brokers, kills."""
