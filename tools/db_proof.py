#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""Does the box's database hold?  Cold starts under load, then many calls.

In its own state directory on free loopback ports, with ``--db mariadb``
(or ``--db sqlite`` to compare):

1. ``--cycles`` cold ``tools/stack.sh up`` / ``down`` in a row while one
   busy process per core loads the machine; counts the ``up`` that fail.
2. One more ``up``, then ``--calls`` attachment create + delete pairs on
   ``--volumes`` volumes, ``--workers`` at a time; counts the answers by
   HTTP status.

Prints one line::

    db_proof: db D, cycles C (failed F), calls N, answers {...}, http 500: K

and exits 0 only when no ``up`` failed and no answer was a 500.

Usage (from the repository root)::

    .venv/bin/python tools/db_proof.py [--db mariadb] [--cycles 20]
        [--calls 200] [--volumes 50] [--workers 50]
"""

import argparse
import collections
import concurrent.futures
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tests import fakes  # noqa: E402
from tests.support import cluster as tc  # noqa: E402

STACK_SH = os.path.join(REPO, 'tools', 'stack.sh')


def _spin():
    while True:
        pass


class Box(tc.ClusterBox):
    """The cluster tests' box helpers, on one volume service."""

    def __init__(self, db):
        super(Box, self).__init__()
        self.env.update(fakes.box_env(self.state, db=db))
        self.env.update({
            'STACK_COORDINATION': 'file', 'STACK_VOLUME_SERVICES': '1',
            'STACK_GLANCE': '0',
            'STACK_BACKENDS': 'tgt'})


def cycles(box, count):
    """Cold up/down *count* times under load; the failures' messages."""
    load = [multiprocessing.Process(target=_spin, daemon=True)
            for _ in range(os.cpu_count() or 2)]
    for proc in load:
        proc.start()
    failures = []
    try:
        for i in range(count):
            started = time.monotonic()
            res = box.stack('up')
            took = time.monotonic() - started
            if res.returncode:
                failures.append('cycle %d: %s' % (
                    i + 1, (res.stderr.strip().splitlines() or ['?'])[-1]))
            print('cycle %d: up %s in %.0f s' % (
                i + 1, 'FAILED' if res.returncode else 'ok', took),
                flush=True)
            box.stack('down')
    finally:
        for proc in load:
            proc.terminate()
    return failures


def calls(box, count, volumes, workers):
    """Attachment create + delete pairs; answers counted by status."""
    box.up()
    vols = [box.create_volume(multiattach=True) for _ in range(volumes)]
    answers = collections.Counter()

    def pair(i):
        vol, host = vols[i % len(vols)], 'proof-h%d' % (i % 50)
        try:
            att = box.api('POST', '/attachments', {'attachment': {
                'volume_uuid': vol, 'connector': tc.connector(host),
                'mode': 'rw'}})['attachment']
            answers['create 200'] += 1
        except tc.ApiError as err:
            answers['create %d' % err.status] += 1
            return
        try:
            box.api('DELETE', '/attachments/%s' % att['id'])
            answers['delete 200'] += 1
        except tc.ApiError as err:
            answers['delete %d' % err.status] += 1

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(pair, range(count)))
    return answers


def main(argv=None):
    parser = argparse.ArgumentParser(prog='tools/db_proof.py')
    parser.add_argument('--db', default='mariadb',
                        choices=('mariadb', 'sqlite'))
    parser.add_argument('--cycles', type=int, default=20)
    parser.add_argument('--calls', type=int, default=200)
    parser.add_argument('--volumes', type=int, default=50)
    parser.add_argument('--workers', type=int, default=50)
    args = parser.parse_args(argv)
    box = Box(args.db)
    try:
        failures = cycles(box, args.cycles)
        answers = calls(box, args.calls, args.volumes, args.workers)
    finally:
        box.stack('down')
        shutil.rmtree(box.state, ignore_errors=True)
    errors = sum(n for k, n in answers.items() if k.endswith(' 500'))
    for failure in failures:
        print(failure)
    print('db_proof: db %s, cycles %d (failed %d), calls %d, answers %s, '
          'http 500: %d' % (args.db, args.cycles, len(failures), args.calls,
                            json.dumps(dict(answers), sort_keys=True),
                            errors), flush=True)
    return 0 if not failures and not errors else 1


if __name__ == '__main__':
    tempfile.tempdir = tempfile.gettempdir()
    sys.exit(main())
