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

"""Two writers of the harness's SQLite file, as oslo.db begins them.

Each case runs in a fresh interpreter: the listener is process-wide.
"""

import os
import subprocess
import sys
import textwrap

import fixtures
import testtools

from cinder_forcedetach.conformance import sqlite_locking

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

# oslo.db's SQLite engine: pysqlite's own BEGIN off, a plain BEGIN at the
# start of each transaction.  c1 reads, c2 commits a write, c1 writes.
RACE = textwrap.dedent('''
    import sqlite3, sys, threading, time
    import sqlalchemy
    from oslo_db.sqlalchemy import engines
    path = sys.argv[1]
    with sqlite3.connect(path) as conn:
        conn.execute('PRAGMA journal_mode=WAL')
        conn.execute('CREATE TABLE t (x INTEGER)')
    url = 'sqlite:///%s?timeout=10' % path
    e1, e2 = engines.create_engine(url), engines.create_engine(url)
    with e1.connect() as c1:
        tx = c1.begin()
        c1.execute(sqlalchemy.text('SELECT count(*) FROM t')).all()
        def other():
            with e2.begin() as c2:
                c2.execute(sqlalchemy.text('INSERT INTO t VALUES (2)'))
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(1)
        try:
            c1.execute(sqlalchemy.text('INSERT INTO t VALUES (1)'))
            tx.commit()
        except sqlalchemy.exc.OperationalError as err:
            print('c1 failed: %s' % err.orig)
            sys.exit(0)
        thread.join()
        print('both wrote')
''')


class BeginImmediateTestCase(testtools.TestCase):

    def race(self, pythonpath):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, 'db')
        res = subprocess.run([sys.executable, '-c', RACE, path],
                             capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, PYTHONPATH=pythonpath))
        self.assertEqual(0, res.returncode, res.stderr[-2000:])
        return res.stdout.strip()

    def test_a_plain_begin_fails_a_read_then_write_at_once(self):
        # The control: what failed an audit's repair in a clean clone.
        self.assertEqual('c1 failed: database is locked', self.race(REPO))

    def test_children_of_the_harness_wait_instead(self):
        self.assertEqual('both wrote',
                         self.race(sqlite_locking.pythonpath(REPO)))
