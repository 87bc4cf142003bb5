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


"""Test fakes shared by the unit tests, the functional tests and benchmarks.

One place for what more than one test module needs and that is not the
code under test:

* free ports: :func:`free_tcp_port`, :func:`free_tcp_ports` and
  :func:`free_tgtd_control_port`;
* :class:`FakeImageService`: Glance as Cinder's image code calls it
  (``show``, ``get_location``, ``download``, ``update``), over files, a
  served directory or a chunk reader, optionally with upstream's own
  ``GlanceImageService.download``;
* :func:`array_locked`: another client holding the SQLite reference
  array's file locked;
* the emulated Fibre Channel switch (:class:`EmulatedSwitchZoneDriver`,
  :class:`EmulatedNameServer`, :class:`FabricState` and the
  ``fabric.sqlite`` helpers) that Cinder's real ZoneManager and
  FCSanLookupService load, and :func:`split_scan_writes` of the emulated
  kernel.  The hosts and kernel of the emulated fabric, which need
  namespaces and loop devices, stay in :mod:`tests.support.fc_fabric`.

Nothing here imports :mod:`tests.functional`: unit tests may use it all.
"""

import contextlib
import json
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
import types
import uuid

from cinder import exception
from cinder.zonemanager.drivers import fc_zone_driver
from cinder.zonemanager import fc_san_lookup_service
from oslo_config import cfg

from cinder_forcedetach.arrays import base as array_base

MiB = 1 << 20
TGTD_SOCKET_DIR = '/var/run/tgtd'


# -- free ports ---------------------------------------------------------------

def _bindable(addr, port):
    with socket.socket() as s:
        try:
            s.bind((addr, port))
        except OSError:
            return False
    return True


#: Where boxes reserve their ports (one file per port, naming its box).
PORT_RESERVATIONS = os.path.join(tempfile.gettempdir(),
                                 'cinder-forcedetach-ports')
#: A reservation whose box still exists lapses after this long anyway.
RESERVATION_SECONDS = 6 * 3600


def _reserve(port, owner):
    """Reserve *port* for the box whose state directory is *owner*.

    Two boxes that pick their ports at the same time (tempest's two runs,
    the functional workers) would otherwise both find a port free before
    either binds it; the second box's service then fails to bind while
    its readiness probe is answered by the first box's (seen: a tempest
    box whose admin token met the other box's Keystone, HTTP 401).  A
    reservation lapses when its box's directory is gone (the box purged,
    the test cleaned up) or after :data:`RESERVATION_SECONDS`.
    """
    os.makedirs(PORT_RESERVATIONS, exist_ok=True)
    path = os.path.join(PORT_RESERVATIONS, str(port))
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            try:
                with open(path) as f:
                    holder = f.read()
                age = time.time() - os.stat(path).st_mtime
            except FileNotFoundError:
                continue
            if holder and os.path.exists(holder) and (
                    age < RESERVATION_SECONDS):
                return False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            continue
        with os.fdopen(fd, 'w') as f:
            f.write(owner)
        return True
    return False


def free_tcp_ports(count, addrs=('127.0.0.1',), span=1,
                   below_ephemeral=False, owner=None):
    """*count* distinct TCP ports P, each with P..P+span-1 free on *addrs*.

    The kernel picks P (a port of its ephemeral range, free on the first
    address); the other addresses (e.g. where a monitor may move) and the
    rest of the span are checked.  With *below_ephemeral* P is an even
    port in 20000-31998 instead: no outgoing connection of another test
    (Ceph clients, initiators) can take it between this choice and the
    daemon binding it.  *owner*: a box's state directory, for which each
    P is reserved (:func:`_reserve`) against other boxes picking it.
    """
    ports = []
    for _ in range(200 * count):
        if len(ports) == count:
            return ports
        if below_ephemeral:
            port = random.randrange(20000, 32000, 2)
        else:
            with socket.socket() as s:
                s.bind((addrs[0], 0))
                port = s.getsockname()[1]
        wanted = range(port, port + span)
        if any(p in taken for p in wanted
               for taken in (range(q, q + span) for q in ports)):
            continue
        if all(_bindable(addr, p) for addr in addrs for p in wanted) and (
                owner is None or _reserve(port, owner)):
            ports.append(port)
    if len(ports) == count:
        return ports
    raise RuntimeError('no %d free port(s) on %s' % (count, ', '.join(addrs)))


def free_tcp_port(host='127.0.0.1', also_on=()):
    """A TCP port free on *host* (and on each address of *also_on*)."""
    return free_tcp_ports(1, (host,) + tuple(also_on))[0]


def free_tgtd_control_port(low=100, high=9999):
    """A tgtd control port (``-C``) whose socket and lock file do not exist.

    A random one, so that concurrent test processes rarely pick the same.
    """
    for _ in range(200):
        port = random.randint(low, high)
        if not any(os.path.exists(os.path.join(
                TGTD_SOCKET_DIR, 'socket.%d%s' % (port, suffix)))
                for suffix in ('', '.lock')):
            return port
    raise RuntimeError('no free tgtd control port')


def box_env(state, keystone=False, glance=False, db=None, nova=False,
            ceph=False, etcd=False, horizon=False, etcd_members=1):
    """The environment of a fresh ``tools/stack.sh`` box on free ports.

    Each port P has P+1 free too (rabbit, etcd and Ceph use a neighbour),
    below the ephemeral range: other tests' outgoing connections cannot
    take them before the box's daemons bind.  No ``OS_*`` or ``CINDER*``
    variable of the caller leaks into it.
    """
    names = ['API', 'RABBIT', 'EPMD', 'ISCSI', 'DB']
    flags = {'STACK_DIR': state}
    if db:
        flags['STACK_DB'] = db
    if keystone:
        names.append('KEYSTONE')
        flags['STACK_KEYSTONE'] = '1'
    if glance:
        names.append('GLANCE')
        flags['STACK_GLANCE'] = '1'
    if nova:
        names += ['KEYSTONE', 'GLANCE', 'NOVA', 'PLACEMENT', 'NEUTRON']
        flags['STACK_NOVA'] = '1'
    if horizon:
        names += ['KEYSTONE', 'HORIZON']
        flags['STACK_HORIZON'] = '1'
    if ceph:
        names.append('CEPH_MON')
    members = ['ETCD_MEMBER_%d' % i for i in range(1, etcd_members + 1)
               if etcd_members > 1]
    if etcd:
        names.append('ETCD')
        flags['STACK_COORDINATION'] = 'etcd'
        flags['STACK_ETCD_MEMBERS'] = str(etcd_members)
        names += members
    names = sorted(set(names))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('OS_', 'CINDER'))}
    env.update(flags)
    ports = free_tcp_ports(len(names), span=2, below_ephemeral=True,
                           owner=os.path.abspath(state))
    for name, port in zip(names, ports):
        # The monitor's msgr v1 port; v2 takes the one below.
        env['STACK_%s_PORT' % name] = str(port + (name == 'CEPH_MON'))
    if etcd and members:
        env['STACK_ETCD_MEMBER_PORTS'] = ','.join(
            env.pop('STACK_%s_PORT' % m) for m in members)
    env['STACK_TGT_CONTROL_PORT'] = str(free_tgtd_control_port())
    return env


# -- Glance -------------------------------------------------------------------

class FakeImageService(object):
    """Glance as Cinder's image code calls it, with hooks real Glance lacks.

    Real Glance runs in the box (``tools/stack.sh up --glance``); the
    tests that use this need crafted images and failing reads.

    ``images[id]`` is ``{'meta': ..., 'url': ..., 'path': ..., 'reader':
    ...}``: ``show`` returns a copy of ``meta`` (ImageNotFound for an
    unknown id, as Glance); image data comes from the file ``path`` or
    from ``reader()`` (an iterable of chunks, e.g. read through librbd).

    ``get_location`` returns ``(url, [{'url': url, 'metadata': {}}])``, or
    ``(None, [])`` without one.  The url is, in this order: an override in
    ``locations[id]``, the ``url`` given to :meth:`add`, the HTTP URL of
    the image on *server* (an HTTP server with ``directory`` and ``url``,
    into which :meth:`add` copies the file), or ``file://<path>`` when
    *file_locations*.

    ``download`` is like Glance's: the chunks, or written into *data*.
    With *glance_download* it is upstream's ``GlanceImageService.download``
    itself (which reads a ``file://`` location only when
    ``allowed_direct_url_schemes`` has ``file``), whose data call
    (``self._client.call(context, 'data', id)``) this service answers.
    ``downloads`` lists ``(image id, type name of the sink)`` per call,
    ``served`` counts the bytes served, ``uploads[id]`` holds what
    ``update`` received.
    """

    def __init__(self, server=None, file_locations=False,
                 glance_download=False, declare_virtual_size=False,
                 chunk_size=MiB):
        self.server = server
        self.file_locations = file_locations
        self.glance_download = glance_download
        self.declare_virtual_size = declare_virtual_size
        self.chunk_size = chunk_size
        self.images = {}
        self.locations = {}
        self.downloads = []
        self.served = 0
        self.uploads = {}
        self.temp_images = None     # image_utils.TemporaryImages sets it
        self._client = self         # upstream's download() calls it

    def add(self, image_id=None, path=None, disk_format='raw', size=None,
            url=None, reader=None, name=None, declare_virtual_size=None):
        """Register an image; returns its id (a new UUID unless given).

        *declare_virtual_size* (default: the service's) adds the
        ``virtual_size`` that ``qemu-img info`` reads from *path*.
        """
        image_id = image_id or str(uuid.uuid4())
        if path and self.server is not None:
            dest = os.path.join(self.server.directory, image_id)
            shutil.copyfile(path, dest)
            path = dest
        if size is None and path:
            size = os.path.getsize(path)
        meta = {'id': image_id, 'name': name or image_id, 'status': 'active',
                'disk_format': disk_format, 'container_format': 'bare',
                'size': size, 'min_disk': 0, 'min_ram': 0, 'owner': None,
                'visibility': 'public', 'protected': False,
                'checksum': None, 'properties': {}, 'created_at': None,
                'updated_at': None, 'deleted': False}
        if declare_virtual_size is None:
            declare_virtual_size = self.declare_virtual_size
        if declare_virtual_size:
            info = json.loads(subprocess.run(
                ['qemu-img', 'info', '--output=json', '-f',
                 'qcow2' if disk_format == 'qcow2' else 'raw', path],
                check=True, capture_output=True, text=True).stdout)
            meta['virtual_size'] = info['virtual-size']
        self.images[image_id] = {'meta': meta, 'url': url, 'path': path,
                                 'reader': reader}
        return image_id

    def _image(self, image_id):
        try:
            return self.images[image_id]
        except KeyError:
            raise exception.ImageNotFound(image_id=image_id)

    def url(self, image_id):
        """Where the image is, as ``get_location`` says (or None)."""
        image = self._image(image_id)
        if self.locations.get(image_id):
            return self.locations[image_id]
        if image['url']:
            return image['url']
        if self.server is not None and image['path']:
            return '%s/%s' % (self.server.url, image_id)
        if self.file_locations and image['path']:
            return 'file://' + image['path']
        return None

    def show(self, context, image_id):
        return dict(self._image(image_id)['meta'])

    def get_location(self, context, image_id):
        url = self.url(image_id)
        return url, ([{'url': url, 'metadata': {}}] if url else [])

    def chunks(self, image_id):
        """The image's data, as Glance's data call serves it."""
        image = self._image(image_id)
        if image['reader'] is not None:
            source = image['reader']()
        else:
            source = _file_chunks(image['path'], self.chunk_size)
        for chunk in source:
            self.served += len(chunk)
            yield chunk

    def call(self, context, method, image_id, **kwargs):
        """The Glance client, as far as upstream's download() calls it."""
        if method != 'data':
            raise NotImplementedError(method)
        return self.chunks(image_id)

    def download(self, context, image_id, data=None):
        self._image(image_id)
        # upstream's fetch hands an eventlet tpool.Proxy of its file
        sink = getattr(data, '_obj', data)
        self.downloads.append((image_id, type(sink).__name__))
        if self.glance_download:
            # imported here, image_utils first: cinder.image.glance
            # imported first is a circular import
            from cinder.image import image_utils  # noqa: F401
            from cinder.image import glance  # noqa: H306
            return glance.GlanceImageService.download(self, context,
                                                      image_id, data)
        if data is None:
            return self.chunks(image_id)
        for chunk in self.chunks(image_id):
            data.write(chunk)

    def update(self, context, image_id, meta, data=None, **kwargs):
        """An upload: what *data* holds is kept in ``uploads[id]``."""
        self.uploads[image_id] = b''.join(iter(
            lambda: data.read(self.chunk_size), b'')) if data else b''
        return self.show(context, image_id)


# -- an FC array's target ports and hosts (unit tests of array and driver) --

#: Target ports as an operator may write them, and as the array keeps them.
FC_TARGETS = ['50:01:43:80:12:34:56:78', '0x5001438012345679']
FC_PORTS = ['5001438012345678', '5001438012345679']
#: Host label -> its initiator WWPNs, in mixed case as HBAs report them.
FC_HOSTS = {'A': ['10000090fa000a01'],
            'B': ['10000090fa000b01', '10000090FA000B02'],
            'C': ['10000090fa000c01']}
FC_ARRAY_TIMEOUT = 0.3


def fc_wwpns(label):
    """The WWPNs of host *label* as the array keeps them."""
    return [w.lower() for w in FC_HOSTS[label]]


# -- attachments as the flow and the drivers read them -----------------------

CONNECTOR_A = {'host': 'compute1', 'initiator': 'iqn.a',
               'wwpns': ['50014380186af83c']}
CONNECTOR_B = {'host': 'compute2', 'initiator': 'iqn.b',
               'wwpns': ['50014380186af83e']}


def attachment(att_id, connector, status='attached'):
    """What the flow reads of an attachment row: id, connector, status."""
    return types.SimpleNamespace(id=att_id, connector=connector,
                                 attach_status=status)


def _file_chunks(path, chunk_size):
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(chunk_size), b''):
            yield chunk


# -- the SQLite reference array -----------------------------------------------

@contextlib.contextmanager
def array_locked(path):
    """Another client holds the array (its SQLite file) locked."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute('BEGIN EXCLUSIVE')
    try:
        yield
    finally:
        conn.execute('ROLLBACK')
        conn.close()


# -- the emulated Fibre Channel switch ---------------------------------------

ZM_GROUP = 'fc-zone-manager'
fabric_opts = [
    cfg.StrOpt('emulated_fabric_db',
               help='fabric.sqlite of the emulated switch (tests only).'),
    cfg.StrOpt('emulated_fabric_name', default='fabric-a',
               help='Name of the emulated fabric (tests only).'),
]
cfg.CONF.register_opts(fabric_opts, group=ZM_GROUP)

ZONE_DRIVER = __name__ + '.EmulatedSwitchZoneDriver'
LOOKUP_SERVICE = __name__ + '.EmulatedNameServer'

SCHEMA = """
CREATE TABLE IF NOT EXISTS config (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS ports (
    wwpn TEXT PRIMARY KEY, kind TEXT NOT NULL, online INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS hbas (
    host TEXT NOT NULL, host_no INTEGER PRIMARY KEY, wwpn TEXT NOT NULL,
    wwnn TEXT NOT NULL, pci TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS zones (
    initiator TEXT NOT NULL, target TEXT NOT NULL,
    PRIMARY KEY (initiator, target));
CREATE TABLE IF NOT EXISTS faults (op TEXT PRIMARY KEY, count INTEGER);
CREATE TABLE IF NOT EXISTS devices (
    host TEXT NOT NULL, name TEXT NOT NULL, host_no INTEGER NOT NULL,
    target TEXT NOT NULL, lun INTEGER NOT NULL, volume TEXT NOT NULL,
    loop TEXT, backing TEXT, state TEXT NOT NULL,
    PRIMARY KEY (host, name));
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL,
    source TEXT NOT NULL, host TEXT, op TEXT NOT NULL, detail TEXT);
"""


@contextlib.contextmanager
def fabric_db(path, timeout=10.0):
    """A transaction on fabric.sqlite (committed unless it raises)."""
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        conn.execute('BEGIN IMMEDIATE')
        yield conn
        conn.execute('COMMIT')
    except BaseException:
        if conn.in_transaction:
            conn.execute('ROLLBACK')
        raise
    finally:
        conn.close()


def record(conn, source, op, host=None, **detail):
    conn.execute('INSERT INTO events (t, source, host, op, detail) VALUES '
                 '(?, ?, ?, ?, ?)', (time.time(), source, host, op,
                                     json.dumps(detail, sort_keys=True)))


def _take_fault(conn, op):
    row = conn.execute('SELECT count FROM faults WHERE op = ?',
                       (op,)).fetchone()
    if row and row[0] > 0:
        conn.execute('UPDATE faults SET count = count - 1 WHERE op = ?',
                     (op,))
        return True
    return False


def normalize_wwpns(values):
    return [array_base.normalize_wwpn(v) for v in values]


class EmulatedSwitchZoneDriver(fc_zone_driver.FCZoneDriver):
    """Zone driver of the emulated switch: zones are rows of fabric.sqlite.

    Emulated because no FC switch can exist here; Cinder's ZoneManager
    (real) calls it exactly as it calls the Brocade or Cisco drivers.
    Policy initiator-target: one zone per (initiator, target) pair.
    """

    VERSION = '1.0.0'

    def __init__(self, **kwargs):
        super(EmulatedSwitchZoneDriver, self).__init__(**kwargs)
        self.db = cfg.CONF[ZM_GROUP].emulated_fabric_db
        self.fabric = cfg.CONF[ZM_GROUP].emulated_fabric_name

    def _change(self, op, fabric, initiator_target_map, host_name):
        pairs = sorted((i, t) for init, targets in
                       initiator_target_map.items()
                       for i in normalize_wwpns([init])
                       for t in normalize_wwpns(targets))
        with fabric_db(self.db) as conn:
            failed = _take_fault(conn, op)
            if failed:
                record(conn, 'switch', op + '-failed', host_name,
                       pairs=pairs)
            else:
                for pair in pairs:
                    if op == 'add_connection':
                        conn.execute('INSERT OR IGNORE INTO zones VALUES '
                                     '(?, ?)', pair)
                    else:
                        conn.execute('DELETE FROM zones WHERE initiator = ? '
                                     'AND target = ?', pair)
                record(conn, 'switch', op, host_name, fabric=fabric,
                       pairs=pairs)
        if failed:
            raise exception.FCZoneDriverException(
                reason='emulated switch fault injected for %s' % op)

    def add_connection(self, fabric, initiator_target_map, host_name=None,
                       storage_system=None):
        self._change('add_connection', fabric, initiator_target_map,
                     host_name)

    def delete_connection(self, fabric, initiator_target_map, host_name=None,
                          storage_system=None):
        self._change('delete_connection', fabric, initiator_target_map,
                     host_name)

    def get_san_context(self, target_wwn_list):
        with fabric_db(self.db) as conn:
            online = {r[0] for r in conn.execute(
                "SELECT wwpn FROM ports WHERE kind = 'target' AND online")}
        found = [t for t in target_wwn_list
                 if array_base.normalize_wwpn(t) in online]
        return {self.fabric: found} if found else {}


class EmulatedNameServer(fc_san_lookup_service.FCSanLookupService):
    """The emulated switch's name server: which ports are logged in."""

    def __init__(self, **kwargs):
        super(EmulatedNameServer, self).__init__(**kwargs)
        self.db = cfg.CONF[ZM_GROUP].emulated_fabric_db
        self.fabric = cfg.CONF[ZM_GROUP].emulated_fabric_name

    def get_device_mapping_from_network(self, initiator_list, target_list):
        with fabric_db(self.db) as conn:
            online = {r[0] for r in conn.execute(
                'SELECT wwpn FROM ports WHERE online')}
        initiators = [w for w in initiator_list
                      if array_base.normalize_wwpn(w) in online]
        targets = [w for w in target_list
                   if array_base.normalize_wwpn(w) in online]
        if not initiators or not targets:
            return {}
        return {self.fabric: {'initiator_port_wwn_list': initiators,
                              'target_port_wwn_list': targets}}


def create_fabric_db(path, array_db=None, volumes_dir=None,
                     target_wwpns=()):
    """Create fabric.sqlite; the array's target ports log in."""
    with fabric_db(path) as conn:
        for statement in SCHEMA.split(';'):
            if statement.strip():
                conn.execute(statement)
        for key, value in (('array_db', array_db),
                           ('volumes_dir', volumes_dir)):
            if value:
                conn.execute('INSERT OR REPLACE INTO config VALUES (?, ?)',
                             (key, value))
        for wwpn in normalize_wwpns(target_wwpns):
            conn.execute("INSERT OR REPLACE INTO ports VALUES (?, 'target', "
                         "1)", (wwpn,))


def login_ports(path, wwpns, kind='initiator', online=True):
    """Ports log in to (or out of) the emulated switch's name server."""
    with fabric_db(path) as conn:
        for wwpn in normalize_wwpns(wwpns):
            conn.execute('INSERT OR REPLACE INTO ports VALUES (?, ?, ?)',
                         (wwpn, kind, int(online)))


def zoning_flags(fabric_db_path):
    """Cinder flags that turn on the real ZoneManager over this switch."""
    return {'zoning_mode': {'v': 'fabric'},
            'zone_driver': {'v': ZONE_DRIVER, 'g': ZM_GROUP},
            'fc_san_lookup_service': {'v': LOOKUP_SERVICE, 'g': ZM_GROUP},
            'emulated_fabric_db': {'v': fabric_db_path, 'g': ZM_GROUP}}


class FabricState(object):
    """Read and poke the emulated fabric's database (tests)."""

    def __init__(self, path):
        self.path = path

    def zones(self):
        with fabric_db(self.path) as conn:
            return set(conn.execute('SELECT initiator, target FROM zones'))

    def zoned_initiators(self):
        return {i for i, _t in self.zones()}

    def events(self, op=None, source=None, since=0):
        query = 'SELECT id, source, host, op, detail FROM events WHERE id > ?'
        args = [since]
        if op:
            query += ' AND op = ?'
            args.append(op)
        if source:
            query += ' AND source = ?'
            args.append(source)
        with fabric_db(self.path) as conn:
            return [{'id': i, 'source': s, 'host': h, 'op': o,
                     **json.loads(d or '{}')}
                    for i, s, h, o, d in conn.execute(query + ' ORDER BY id',
                                                      args)]

    def last_event_id(self):
        with fabric_db(self.path) as conn:
            return conn.execute('SELECT COALESCE(MAX(id), 0) FROM '
                                'events').fetchone()[0]

    def inject_fault(self, op, count=1):
        """Make the switch's next *count* calls of *op* fail."""
        with fabric_db(self.path) as conn:
            conn.execute('INSERT OR REPLACE INTO faults VALUES (?, ?)',
                         (op, count))

    def devices(self, host=None):
        with fabric_db(self.path) as conn:
            rows = conn.execute(
                'SELECT host, name, host_no, target, lun, volume, loop, '
                'state FROM devices' + (' WHERE host = ?' if host else ''),
                (host,) if host else ()).fetchall()
        keys = ('host', 'name', 'host_no', 'target', 'lun', 'volume', 'loop',
                'state')
        return [dict(zip(keys, r)) for r in rows]


# -- the emulated kernel -----------------------------------------------------

def split_scan_writes(data):
    """``"c t l"`` triples of the writes a ``scan`` FIFO has buffered.

    sysfs sees one store per write(); a FIFO does not keep write
    boundaries, and os-brick writes ``"0 0 1"`` without a newline, so two
    writes read at once look like ``"0 0 10 1 1"``.  An emulated HBA has
    one channel, written as one character (``0``, or ``-`` in a wildcard
    scan), so a merged token is the LUN followed by that character.
    """
    triples = []
    for line in data.splitlines():
        words = line.split()
        while len(words) >= 3:
            if len(words) == 3:
                triples.append(words)
                break
            merged = words[2]
            triples.append(words[:2] + [merged[:-1]])
            words = [merged[-1]] + words[3:]
    return triples
