"""What the functional tests, the benchmarks and the tools share.

Real processes and their readers (tgtd, Ceph, the FC fabric), the cut-off
check, waiting: imported by ``tests/functional``, ``benchmarks/`` and
``tools/``, which never import a ``test_*`` module.
"""
