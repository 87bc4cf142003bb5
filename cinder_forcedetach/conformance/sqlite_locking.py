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

"""SQLite transactions that wait for each other: the harness's database.

The harness's services and its children (a host's volume service, a local
command) share one SQLite file in WAL mode.  oslo.db begins every
transaction with a plain ``BEGIN``: a read transaction that then writes
after another process committed fails at once with "database is locked"
(SQLite's busy snapshot: no busy timeout applies), which failed an
audit's repair in a clean-clone run.  ``BEGIN IMMEDIATE`` takes the write
lock first, so a transaction waits (up to the connection's ``timeout``)
instead.  The children the harness starts (a local command, a host's
processes) load :func:`begin_immediate` from :data:`SITE_DIR`'s
``sitecustomize`` (:func:`pythonpath`).  The harness's own process keeps
oslo.db's ``BEGIN``: its services are green threads, and one waiting in
SQLite's busy handler (a blocking C call) would stop the green thread
that holds the lock.
"""

import os

import sqlalchemy
from sqlalchemy import engine as sa_engine

#: The directory whose ``sitecustomize`` calls :func:`begin_immediate`.
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        'sqlite_site')

_registered = []


def _begin(conn):
    # Before oslo.db's own listener (class-level listeners run first),
    # which then finds the transaction begun and emits nothing.
    if conn.dialect.name == 'sqlite' and 'in_transaction' not in conn.info:
        conn.exec_driver_sql('BEGIN IMMEDIATE')
        conn.info['in_transaction'] = True


def begin_immediate():
    """Every SQLite transaction of this process begins IMMEDIATE."""
    if not _registered:
        sqlalchemy.event.listen(sa_engine.Engine, 'begin', _begin)
        _registered.append(_begin)


def pythonpath(*paths):
    """A ``PYTHONPATH`` for a child of the harness: :data:`SITE_DIR` first."""
    return os.pathsep.join((SITE_DIR,) + paths)
