"""tether's benchmark suite: ``python -m bench`` (or ``make bench``).

Each tether figure is printed beside a baseline measured in the same run, and
every benchmark writes ``bench/results/<name>.json`` (plus ``summary.json``)
with the machine it ran on. Benchmarks report; they never assert.

Modules: :mod:`bench.start_latency`, :mod:`bench.recovery`, :mod:`bench.rpc`,
:mod:`bench.logs`, :mod:`bench.memory`; shared machinery in :mod:`bench.harness`.
"""
