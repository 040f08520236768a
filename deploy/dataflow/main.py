"""The Dataflow flex template's entry point: `unitless train` with the template's parameters
(Dataflow passes them as --name=value; the pipeline options among them go to Beam)."""
import sys

from unitless.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
