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

"""Reference Fibre Channel array whose state is a SQLite file.

The LUN masking state of a real array (target ports, hosts with their
WWPNs, volume -> host -> LUN maps) lives in one SQLite file, so it is real,
shared by every process that uses the file, and can be inspected with
``sqlite3 FILE .dump``.  It fails the way an array does:

* removing what is already gone (host, map) succeeds;
* a host marked busy (:meth:`SqliteArray.set_host_busy`, as when another
  management session holds it) refuses map/unmap with ``HostBusy``;
* every operation is one transaction with a per-operation timeout
  (``forcedetach_fc_array_timeout``): when another process holds the file
  locked longer, ``ArrayTimeout`` is raised and nothing changes.

On a host with a Linux LIO Fibre Channel target (a QLogic HBA driven by
``qla2xxx`` in target mode, and configfs), ``rtslib-fb`` could implement
:class:`~cinder_forcedetach.arrays.base.FCArray` with the same semantics:
``target_ports`` = the ``qla2xxx`` fabric module's target WWNs; a host = one
``NodeACL`` per initiator WWPN in each target's TPG; ``map_volume`` = a
``FileIOStorageObject`` on the volume file, a TPG ``LUN`` and a
``MappedLUN`` in each of the host's NodeACLs; ``unmap_volume`` = deleting
those MappedLUNs (then the TPG LUN and storage object once no ACL maps
them).  This machine has neither configfs nor an FC HBA, hence this file.
"""

import contextlib
import os
import sqlite3
import time
from typing import Any, Iterable, Iterator, Optional

from cinder.volume import configuration
from oslo_config import cfg
from oslo_log import log as logging

from cinder_forcedetach.arrays import base

LOG = logging.getLogger(__name__)

fc_opts = [
    cfg.StrOpt('forcedetach_fc_array_db',
               default='$state_path/forcedetach-fc-array.sqlite',
               help='SQLite file that holds the LUN masking state of the '
                    'reference Fibre Channel array (hosts, WWPNs, LUN '
                    'maps, target ports).'),
    cfg.ListOpt('forcedetach_fc_target_wwpns',
                default=[],
                help='WWPNs of the array\'s FC target ports (16 hexadecimal '
                     'digits each, colons allowed), returned as target_wwn '
                     'and zoned with the initiators.'),
    cfg.FloatOpt('forcedetach_fc_array_timeout',
                 default=10.0, min=0.01,
                 help='Seconds one array operation may wait for the array '
                      '(here: for the SQLite file lock) before it fails '
                      'with a timeout error and changes nothing.'),
]

cfg.CONF.register_opts(fc_opts, group=configuration.SHARED_CONF_GROUP)

FIRST_LUN = 1
MAX_LUN = 16383

SCHEMA = """
CREATE TABLE IF NOT EXISTS target_ports (
    wwpn TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS hosts (
    name TEXT PRIMARY KEY,
    busy TEXT);
CREATE TABLE IF NOT EXISTS host_wwpns (
    wwpn TEXT PRIMARY KEY,
    host TEXT NOT NULL REFERENCES hosts(name) ON DELETE CASCADE);
CREATE TABLE IF NOT EXISTS lun_maps (
    volume TEXT NOT NULL,
    host TEXT NOT NULL REFERENCES hosts(name),
    lun INTEGER NOT NULL,
    PRIMARY KEY (volume, host),
    UNIQUE (host, lun));
"""

_LOCKED_MESSAGES = ('database is locked', 'database table is locked',
                    'database is busy')


class SqliteArray(base.FCArray):
    """An FC array whose masking state is the SQLite file *path*."""

    def __init__(self, path: str, timeout: float = 10.0,
                 target_ports: Optional[Iterable[str]] = None) -> None:
        self.path = path
        self.timeout = timeout
        self._configured_ports = [base.normalize_wwpn(w)
                                  for w in (target_ports or [])]

    # -- plumbing --------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self, operation: str,
                     write: bool = True) -> Iterator[sqlite3.Connection]:
        """One array operation: a transaction that fails as a whole."""
        start = time.monotonic()
        conn = None
        try:
            conn = sqlite3.connect(self.path, timeout=self.timeout,
                                   isolation_level=None)
            conn.execute('PRAGMA foreign_keys = ON')
            conn.execute('BEGIN IMMEDIATE' if write else 'BEGIN')
            yield conn
            conn.execute('COMMIT')
        except sqlite3.OperationalError as err:
            _rollback(conn)
            if any(m in str(err) for m in _LOCKED_MESSAGES):
                LOG.error('Array operation %(op)s timed out after %(t).2f s.',
                          {'op': operation, 't': time.monotonic() - start})
                raise base.ArrayTimeout(operation=operation,
                                        timeout=self.timeout, reason=err)
            raise base.ArrayError(operation=operation, reason=err)
        except sqlite3.Error as err:
            _rollback(conn)
            raise base.ArrayError(operation=operation, reason=err)
        except BaseException:
            _rollback(conn)
            raise
        finally:
            if conn is not None:
                conn.close()

    @staticmethod
    def _host_row(conn: sqlite3.Connection,
                  host: str) -> Optional[tuple[str, Optional[str]]]:
        return conn.execute('SELECT name, busy FROM hosts WHERE name = ?',
                            (host,)).fetchone()

    @staticmethod
    def _check_not_busy(conn: sqlite3.Connection, host: str,
                        operation: str) -> None:
        row = conn.execute('SELECT busy FROM hosts WHERE name = ?',
                           (host,)).fetchone()
        if row and row[0]:
            raise base.HostBusy(host=host, operation=operation,
                                reason=row[0])

    # -- setup -------------------------------------------------------------

    def setup(self) -> None:
        """Create the schema; record the configured target ports."""
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, mode=0o750, exist_ok=True)
        with self._transaction('setup') as conn:
            for statement in SCHEMA.split(';'):
                if statement.strip():
                    conn.execute(statement)
            if self._configured_ports:
                conn.execute('DELETE FROM target_ports')
                conn.executemany('INSERT INTO target_ports VALUES (?)',
                                 [(w,) for w in self._configured_ports])

    def target_ports(self) -> list[str]:
        with self._transaction('target_ports', write=False) as conn:
            return [r[0] for r in conn.execute(
                'SELECT wwpn FROM target_ports ORDER BY wwpn')]

    # -- hosts -------------------------------------------------------------

    def find_host(self, wwpns: Iterable[str]) -> Optional[str]:
        with self._transaction('find_host', write=False) as conn:
            return self._find_host(conn, wwpns)

    @staticmethod
    def _find_host(conn: sqlite3.Connection,
                   wwpns: Iterable[str]) -> Optional[str]:
        wwpns = [base.normalize_wwpn(w) for w in wwpns]
        owners = sorted({r[0] for r in conn.execute(
            'SELECT host FROM host_wwpns WHERE wwpn IN (%s)' %
            ','.join('?' * len(wwpns)), wwpns)})
        if len(owners) > 1:
            raise base.HostConflict(wwpns=', '.join(wwpns),
                                    hosts=', '.join(owners))
        return owners[0] if owners else None

    def ensure_host(self, name: str, wwpns: Iterable[str]) -> str:
        if not name or not wwpns:
            raise base.ArrayError(operation='ensure_host',
                                  reason='a host needs a name and WWPNs')
        wwpns = [base.normalize_wwpn(w) for w in wwpns]
        with self._transaction('ensure_host') as conn:
            host = self._find_host(conn, wwpns)
            if host is None:
                host = name
                suffix = 0
                while self._host_row(conn, host) is not None:
                    suffix += 1
                    host = '%s-%d' % (name, suffix)
                conn.execute('INSERT INTO hosts (name) VALUES (?)', (host,))
                LOG.info('Array host %(host)s created for WWPNs %(wwpns)s.',
                         {'host': host, 'wwpns': ', '.join(wwpns)})
            known = {r[0] for r in conn.execute(
                'SELECT wwpn FROM host_wwpns WHERE host = ?', (host,))}
            missing = [w for w in wwpns if w not in known]
            if missing:
                self._check_not_busy(conn, host, 'ensure_host')
                conn.executemany('INSERT INTO host_wwpns VALUES (?, ?)',
                                 [(w, host) for w in missing])
            return host

    def host_wwpns(self, host: str) -> list[str]:
        with self._transaction('host_wwpns', write=False) as conn:
            return [r[0] for r in conn.execute(
                'SELECT wwpn FROM host_wwpns WHERE host = ? ORDER BY wwpn',
                (host,))]

    def delete_host(self, host: str) -> None:
        with self._transaction('delete_host') as conn:
            if self._host_row(conn, host) is None:
                LOG.debug('Array host %s already deleted.', host)
                return
            self._check_not_busy(conn, host, 'delete_host')
            mapped = [r[0] for r in conn.execute(
                'SELECT volume FROM lun_maps WHERE host = ?', (host,))]
            if mapped:
                raise base.HostBusy(host=host, operation='delete_host',
                                    reason='volumes %s are still mapped' %
                                    ', '.join(sorted(mapped)))
            conn.execute('DELETE FROM hosts WHERE name = ?', (host,))

    def set_host_busy(self, host: str, reason: Optional[str] = None) -> None:
        """Mark *host* busy (*reason*) or free (None): an admin action."""
        with self._transaction('set_host_busy') as conn:
            conn.execute('UPDATE hosts SET busy = ? WHERE name = ?',
                         (reason, host))

    # -- LUN maps ------------------------------------------------------------

    def map_volume(self, volume_name: str, host: str) -> int:
        with self._transaction('map_volume') as conn:
            if self._host_row(conn, host) is None:
                raise base.ArrayError(operation='map_volume',
                                      reason='no array host %s' % host)
            row = conn.execute(
                'SELECT lun FROM lun_maps WHERE volume = ? AND host = ?',
                (volume_name, host)).fetchone()
            if row:
                return row[0]
            self._check_not_busy(conn, host, 'map_volume')
            used = {r[0] for r in conn.execute(
                'SELECT lun FROM lun_maps WHERE host = ?', (host,))}
            lun = next((n for n in range(FIRST_LUN, MAX_LUN + 1)
                        if n not in used), None)
            if lun is None:
                raise base.ArrayError(operation='map_volume',
                                      reason='host %s has no free LUN id' %
                                      host)
            conn.execute('INSERT INTO lun_maps VALUES (?, ?, ?)',
                         (volume_name, host, lun))
            LOG.info('Volume %(vol)s mapped to array host %(host)s as LUN '
                     '%(lun)d.', {'vol': volume_name, 'host': host,
                                  'lun': lun})
            return lun

    def unmap_volume(self, volume_name: str,
                     host: Optional[str] = None) -> list[str]:
        with self._transaction('unmap_volume') as conn:
            query = 'SELECT host FROM lun_maps WHERE volume = ?'
            args: tuple[str, ...] = (volume_name,)
            if host is not None:
                query += ' AND host = ?'
                args += (host,)
            hosts = [r[0] for r in conn.execute(query, args)]
            for name in hosts:
                self._check_not_busy(conn, name, 'unmap_volume')
            for name in hosts:
                conn.execute('DELETE FROM lun_maps WHERE volume = ? AND '
                             'host = ?', (volume_name, name))
            if hosts:
                LOG.info('Volume %(vol)s unmapped from array host(s) '
                         '%(hosts)s.', {'vol': volume_name,
                                        'hosts': ', '.join(hosts)})
            else:
                LOG.debug('Volume %(vol)s was already unmapped (%(host)s).',
                          {'vol': volume_name, 'host': host or 'all hosts'})
            return [r[0] for r in conn.execute(
                'SELECT host FROM lun_maps WHERE volume = ? ORDER BY host',
                (volume_name,))]

    def hosts_of_volume(self, volume_name: str) -> dict[str, int]:
        with self._transaction('hosts_of_volume', write=False) as conn:
            return dict(conn.execute(
                'SELECT host, lun FROM lun_maps WHERE volume = ?',
                (volume_name,)).fetchall())

    def luns_of_host(self, host: str) -> dict[str, int]:
        with self._transaction('luns_of_host', write=False) as conn:
            return dict(conn.execute(
                'SELECT volume, lun FROM lun_maps WHERE host = ?',
                (host,)).fetchall())

    # -- inspection ----------------------------------------------------------

    def masking(self) -> dict[str, dict[str, list[str]]]:
        dump = self.dump()
        return {volume: {host: list(dump['hosts'][host]['wwpns'])
                         for host in maps}
                for volume, maps in dump['maps'].items()}

    def dump(self) -> dict[str, Any]:
        """The whole masking state, for operators and tests."""
        with self._transaction('dump', write=False) as conn:
            hosts = {name: {'busy': busy, 'wwpns': []}
                     for name, busy in conn.execute(
                         'SELECT name, busy FROM hosts')}
            for wwpn, host in conn.execute(
                    'SELECT wwpn, host FROM host_wwpns ORDER BY wwpn'):
                hosts[host]['wwpns'].append(wwpn)
            maps: dict[str, dict[str, int]] = {}
            for volume, host, lun in conn.execute(
                    'SELECT volume, host, lun FROM lun_maps'):
                maps.setdefault(volume, {})[host] = lun
            ports = [r[0] for r in conn.execute(
                'SELECT wwpn FROM target_ports ORDER BY wwpn')]
        return {'target_ports': ports, 'hosts': hosts, 'maps': maps}


def _rollback(conn: Optional[sqlite3.Connection]) -> None:
    if conn is not None and conn.in_transaction:
        try:
            conn.execute('ROLLBACK')
        except sqlite3.Error:
            LOG.debug('Rollback of an array transaction failed.')


def from_config(configuration: Any) -> SqliteArray:
    """The array a backend section configures."""
    return SqliteArray(configuration.forcedetach_fc_array_db,
                       timeout=configuration.forcedetach_fc_array_timeout,
                       target_ports=configuration.forcedetach_fc_target_wwpns)
