"""Entry point of a measurement's fresh process: ``python -m benchmarks.child module:function '<json kwargs>'``.

Prints the function's JSON result on a line starting with ``RESULT_PREFIX`` (libraries may print too).
"""

from __future__ import annotations

import importlib
import json
import sys

from benchmarks.common import RESULT_PREFIX


def main() -> None:
    target, arguments = sys.argv[1], json.loads(sys.argv[2])
    module_name, function_name = target.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    result = function(**arguments)
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
