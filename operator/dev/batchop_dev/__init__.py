"""batchop-dev: the tooling beside the operator (local stack, simulator plots, bench).

Never in the operator image: `batchop` (the runtime package) imports nothing from here at
module level, only inside the `local`, `demo`, `load`, `bench` and `simulate --plot` commands.
"""
