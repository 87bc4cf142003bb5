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

"""An emulated Fibre Channel fabric on which os-brick's real FC code runs.

This machine has no FC HBA, no FC switch, and its kernel has no SCSI
subsystem (see machine-facts.md), so exactly these parts are emulated:

* **The switch** (in :mod:`tests.fakes`, which unit tests use too):
  :class:`~tests.fakes.EmulatedSwitchZoneDriver` and
  :class:`~tests.fakes.EmulatedNameServer` are the zone driver and SAN
  lookup service that Cinder's real ``ZoneManager`` /
  ``FCSanLookupService`` load from ``[fc-zone-manager]``; zones
  (initiator-target pairs), logged-in ports and every call are rows of a
  SQLite file, ``fabric.sqlite``.
* **Each host's HBAs and SCSI layer**: an :class:`EmulatedHost` runs its
  code in a private mount namespace (``unshare(CLONE_NEWNS)``) where
  ``/sys`` and ``/dev`` are bind mounts of trees this module writes:
  ``/sys/class/fc_host/hostN/{port_name,node_name,port_state}`` (symlinked
  into ``/sys/devices/pci.../hostN`` as in sysfs, which gives os-brick its
  PCI address), ``/sys/class/scsi_host/hostN/scan``,
  ``/sys/class/fc_transport/targetN:0:T/port_name`` for the zoned target
  ports, ``/sys/block/sdX/device/{delete,wwid,state}``, ``/dev/sdX`` and
  ``/dev/disk/by-path/pci-<pci>-fc-0x<target wwpn>-lun-<lun>``.
  ``/lib/udev/scsi_id`` is replaced there by a script answering page 0x83
  from ``/sys/block/sdX/device/wwid``, as a loop device answers no SCSI
  INQUIRY.
* **The kernel's answer to sysfs writes**: ``scan`` and ``delete`` are
  FIFOs read by :func:`kernel_main` (a separate process, the
  :class:`FabricKernel`).  A scan adds ``/dev/sdX`` only when the array maps
  the LUN to the HBA's WWPN *and* the switch zones it with the target port:
  ``sdX`` is a block node of a real loop device (``losetup``) on the volume
  file.  A delete removes the device and detaches the loop device.  When
  the masking or zone of a live device goes away, its loop device is
  detached ("path lost"): the host's next I/O fails with ENXIO.  Every
  write is recorded in the ``events`` table.
* **Each host operation is a fresh process**, forked by the fabric's
  zygote (:func:`zygote_main`), which imported Cinder and os-brick once:
  a fresh interpreter per call spent ~1 s (~4 s for a force-detach) in
  imports, most of an FC test's time.

Real: os-brick's ``FibreChannelConnector`` (``connect_volume``,
``disconnect_volume``, ``get_connector_properties``) unmodified, its
privsep daemon (``Method.FORK``, so ``tee``, ``dd``, ``blockdev`` and
``scsi_id`` really run as root), loop devices and the volume files, the
array's SQLite masking state, Cinder's ZoneManager.
"""

import contextlib
import ctypes
import errno
import hashlib
import itertools
import json
import logging as pylogging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

import fixtures
from oslo_config import cfg

from cinder_forcedetach.arrays import base as array_base
from cinder_forcedetach.arrays import sqlite as sqlite_array
from tests import fakes
from tests.support import waiting

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

SCSI_ID = """#!/bin/sh
# Emulated /lib/udev/scsi_id (cinder-forcedetach tests): a loop device
# answers no SCSI INQUIRY, so page 0x83 comes from the emulated sysfs.
for dev; do :; done
name=$(basename "$(readlink -f "$dev")")
wwid=$(cat "/sys/block/$name/device/wwid" 2>/dev/null) || exit 1
echo "3${wwid#naa.}"
"""


# -- the fabric database ------------------------------------------------------

def _hba_dir(root, hba):
    return os.path.join(root, 'sys', 'devices', 'pci0000:00', '0000:00:03.0',
                        hba['pci'], 'host%d' % hba['host_no'])


def host_root(fabric_dir, host):
    return os.path.join(fabric_dir, 'hosts', host)


def _mkfifo(path):
    if not os.path.exists(path):
        os.mkfifo(path, 0o600)


def build_host_tree(fabric_dir, host, hbas):
    """Write the emulated /sys and /dev of *host* (HBAs, no devices)."""
    root = host_root(fabric_dir, host)
    for sub in ('sys/class/fc_host', 'sys/class/scsi_host',
                'sys/class/fc_transport', 'sys/class/fc_remote_ports',
                'sys/block', 'dev/disk/by-path', 'dev/disk/by-id', 'dev/shm'):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    for hba in hbas:
        hdir = _hba_dir(root, hba)
        name = 'host%d' % hba['host_no']
        fc_dir = os.path.join(hdir, 'fc_host', name)
        scsi_dir = os.path.join(hdir, 'scsi_host', name)
        os.makedirs(fc_dir, exist_ok=True)
        os.makedirs(scsi_dir, exist_ok=True)
        for attr, value in (('port_name', '0x' + hba['wwpn']),
                            ('node_name', '0x' + hba['wwnn']),
                            ('port_state', 'Online')):
            with open(os.path.join(fc_dir, attr), 'w') as f:
                f.write(value + '\n')
        _mkfifo(os.path.join(scsi_dir, 'scan'))
        for cls, target in (('fc_host', fc_dir), ('scsi_host', scsi_dir)):
            link = os.path.join(root, 'sys', 'class', cls, name)
            if not os.path.islink(link):
                os.symlink(os.path.relpath(target, os.path.dirname(link)),
                           link)
    dev = os.path.join(root, 'dev')
    for name, minor in (('null', 3), ('zero', 5), ('full', 7),
                        ('random', 8), ('urandom', 9)):
        path = os.path.join(dev, name)
        if not os.path.exists(path):
            os.mknod(path, 0o666 | 0o020000, os.makedev(1, minor))
    for name, target in (('fd', '/proc/self/fd'), ('stdin', '/proc/self/fd/0'),
                         ('stdout', '/proc/self/fd/1'),
                         ('stderr', '/proc/self/fd/2')):
        if not os.path.islink(os.path.join(dev, name)):
            os.symlink(target, os.path.join(dev, name))
    scsi_id = os.path.join(root, 'scsi_id')
    with open(scsi_id, 'w') as f:
        f.write(SCSI_ID)
    os.chmod(scsi_id, 0o755)
    return root


# Block major 240 is reserved for local/experimental use and unregistered
# here: opening a node with it fails with ENXIO, as an offline disk would.
OFFLINE_RDEV = os.makedev(240, 0)


class FabricKernel(object):
    """What the hosts' kernels do when os-brick writes to sysfs.

    Runs in its own process (:func:`kernel_main`): it reads the ``scan``
    and ``delete`` FIFOs of every emulated host and keeps
    ``fc_transport`` and the devices in line with zones and masking.
    """

    TICK = 0.05

    def __init__(self, fabric_dir):
        self.dir = fabric_dir
        self.db = os.path.join(fabric_dir, 'fabric.sqlite')
        with fakes.fabric_db(self.db) as conn:
            config = dict(conn.execute('SELECT key, value FROM config'))
        self.array = sqlite_array.SqliteArray(config['array_db'],
                                              timeout=0.2)
        self.volumes_dir = config['volumes_dir']
        self.fifos = {}     # fd -> (kind, host, key)
        self.paths = {}     # FIFO path -> fd
        self.stopping = False

    # -- FIFOs -------------------------------------------------------------

    def _watch(self, path, kind, host, key):
        if path in self.paths or not os.path.exists(path):
            return
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        self.paths[path] = fd
        self.fifos[fd] = (kind, host, key, path)

    def _unwatch(self, path):
        fd = self.paths.pop(path, None)
        if fd is not None:
            self.fifos.pop(fd, None)
            os.close(fd)

    def _hbas(self, conn):
        return [dict(zip(('host', 'host_no', 'wwpn', 'wwnn', 'pci'), r))
                for r in conn.execute('SELECT host, host_no, wwpn, wwnn, pci '
                                      'FROM hbas')]

    def refresh_watches(self):
        with fakes.fabric_db(self.db) as conn:
            hbas = self._hbas(conn)
            devices = conn.execute("SELECT host, name FROM devices WHERE "
                                   "state != 'deleted'").fetchall()
        for hba in hbas:
            root = host_root(self.dir, hba['host'])
            self._watch(os.path.join(_hba_dir(root, hba), 'scsi_host',
                                     'host%d' % hba['host_no'], 'scan'),
                        'scan', hba['host'], hba['host_no'])
        for host, name in devices:
            self._watch(os.path.join(host_root(self.dir, host), 'sys',
                                     'block', name, 'device', 'delete'),
                        'delete', host, name)

    # -- fabric and array lookups ------------------------------------------

    @staticmethod
    def _zoned(conn, initiator, target):
        return conn.execute('SELECT 1 FROM zones WHERE initiator = ? AND '
                            'target = ?', (initiator, target)).fetchone()

    def _masked_luns(self, initiator):
        host = self.array.find_host([initiator])
        return {} if host is None else {
            lun: volume
            for volume, lun in self.array.luns_of_host(host).items()}

    def _masked_volume(self, initiator, lun):
        return self._masked_luns(initiator).get(lun)

    # -- sysfs writes --------------------------------------------------------

    def handle(self, kind, host, key, data):
        with fakes.fabric_db(self.db) as conn:
            fakes.record(conn, 'kernel', 'write', host, file=kind, key=key,
                         data=data)
        if kind == 'scan':
            for words in fakes.split_scan_writes(data):
                self.scan(host, key, words)
        elif kind == 'delete' and '1' in data:
            self.delete(host, key, 'delete')

    def scan(self, host, host_no, words):
        if len(words) != 3:
            return
        channel, tid, lun = words
        with fakes.fabric_db(self.db) as conn:
            hba = next(h for h in self._hbas(conn) if h['host_no'] == host_no)
            targets = self._target_ids(conn)
        wanted = [t for t, i in targets.items() if tid in ('-', str(i))]
        if lun == '-':
            try:
                luns = self._masked_luns(hba['wwpn'])
            except array_base.ArrayError:
                luns = []
        else:
            luns = [int(lun)]
        for target in wanted:
            for one_lun in luns:
                self._scan_one(host, hba, target, one_lun)

    def _target_ids(self, conn):
        ports = [r[0] for r in conn.execute(
            "SELECT wwpn FROM ports WHERE kind = 'target' ORDER BY wwpn")]
        return {p: i for i, p in enumerate(ports)}

    def _scan_one(self, host, hba, target, lun):
        try:
            volume = self._masked_volume(hba['wwpn'], lun)
        except array_base.ArrayError as err:
            volume, why = None, 'array unavailable: %s' % err
        else:
            why = 'LUN not masked to this initiator'
        with fakes.fabric_db(self.db) as conn:
            zoned = self._zoned(conn, hba['wwpn'], target)
            if volume and not zoned:
                why = 'initiator not zoned with target'
            existing = conn.execute(
                'SELECT name, state, volume FROM devices WHERE host = ? AND '
                'host_no = ? AND target = ? AND lun = ? AND state != '
                "'deleted'", (host, hba['host_no'], target, lun)).fetchone()
            if not (volume and zoned):
                fakes.record(conn, 'kernel', 'scan-nothing', host,
                             target=target, lun=lun, why=why)
                return
            if existing and existing[1] == 'running' and (
                    existing[2] == volume):
                return
        if existing:
            self.delete(host, existing[0], 'replaced')
        self._add_device(host, hba, target, lun, volume)

    def _add_device(self, host, hba, target, lun, volume):
        root = host_root(self.dir, host)
        backing = os.path.join(self.volumes_dir, volume)
        loop = subprocess.run(['losetup', '-f', '--show', backing],
                              check=True, capture_output=True,
                              text=True).stdout.strip()
        rdev = os.stat(loop).st_rdev
        with fakes.fabric_db(self.db) as conn:
            used = {r[0] for r in conn.execute(
                "SELECT name FROM devices WHERE host = ? AND state != "
                "'deleted'", (host,))}
            name = next('sd' + c for c in 'bcdefghijklmnopqrstuvwxyz'
                        if 'sd' + c not in used)
            conn.execute('DELETE FROM devices WHERE host = ? AND name = ?',
                         (host, name))
            conn.execute('INSERT INTO devices VALUES (?, ?, ?, ?, ?, ?, ?, '
                         "?, 'running')", (host, name, hba['host_no'],
                                           target, lun, volume, loop,
                                           backing))
            node = os.path.join(root, 'dev', name)
            if os.path.exists(node):
                os.unlink(node)
            os.mknod(node, 0o660 | 0o060000, rdev)
            block = os.path.join(root, 'sys', 'block', name)
            os.makedirs(os.path.join(block, 'device'), exist_ok=True)
            wwid = 'naa.6' + hashlib.sha256(volume.encode()).hexdigest()[:31]
            for rel, value in (('device/wwid', wwid),
                               ('device/state', 'running'),
                               ('size', str(os.path.getsize(backing) // 512))):
                with open(os.path.join(block, rel), 'w') as f:
                    f.write(value + '\n')
            _mkfifo(os.path.join(block, 'device', 'delete'))
            link = os.path.join(root, 'dev', 'disk', 'by-path',
                                'pci-%s-fc-0x%s-lun-%d' % (hba['pci'], target,
                                                           lun))
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink('../../' + name, link)
            fakes.record(conn, 'kernel', 'device-added', host, device=name,
                         target=target, lun=lun, volume=volume, loop=loop)

    def delete(self, host, name, why):
        root = host_root(self.dir, host)
        with fakes.fabric_db(self.db) as conn:
            row = conn.execute('SELECT loop, backing, state FROM devices '
                               'WHERE host = ? AND name = ?',
                               (host, name)).fetchone()
            if row is None or row[2] == 'deleted':
                return
            for link in os.listdir(os.path.join(root, 'dev', 'disk',
                                                'by-path')):
                path = os.path.join(root, 'dev', 'disk', 'by-path', link)
                if os.readlink(path) == '../../' + name:
                    os.unlink(path)
            delete_fifo = os.path.join(root, 'sys', 'block', name, 'device',
                                       'delete')
            self._unwatch(delete_fifo)
            shutil.rmtree(os.path.join(root, 'sys', 'block', name),
                          ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(root, 'dev', name))
            if row[2] == 'running':
                detach_loop(row[0], row[1])
            conn.execute("UPDATE devices SET state = 'deleted' WHERE host = ? "
                         "AND name = ?", (host, name))
            fakes.record(conn, 'kernel', 'device-deleted', host, device=name,
                         why=why)

    # -- zones and masking changing under live devices ---------------------

    def reconcile(self):
        """fc_transport follows zones; a device whose path is gone fails."""
        with fakes.fabric_db(self.db) as conn:
            hbas = self._hbas(conn)
            targets = self._target_ids(conn)
            zones = set(conn.execute('SELECT initiator, target FROM zones'))
            devices = conn.execute(
                "SELECT host, name, host_no, target, lun, volume, loop, "
                "backing FROM devices WHERE state = 'running'").fetchall()
        for hba in hbas:
            base = os.path.join(host_root(self.dir, hba['host']), 'sys',
                                'class', 'fc_transport')
            for target, tid in targets.items():
                name = 'target%d:0:%d' % (hba['host_no'], tid)
                path = os.path.join(base, name)
                if (hba['wwpn'], target) in zones:
                    if not os.path.isdir(path):
                        os.makedirs(path)
                        with open(os.path.join(path, 'port_name'), 'w') as f:
                            f.write('0x%s\n' % target)
                elif os.path.isdir(path):
                    shutil.rmtree(path)
        wwpn_of = {h['host_no']: h['wwpn'] for h in hbas}
        for host, name, host_no, target, lun, volume, loop, backing in devices:
            initiator = wwpn_of.get(host_no)
            try:
                masked = self._masked_volume(initiator, lun) == volume
            except array_base.ArrayError:
                continue  # the array is busy: decide at the next tick
            zoned = (initiator, target) in zones
            if masked and zoned:
                continue
            root = host_root(self.dir, host)
            # An offline SCSI disk keeps its node but fails every open and
            # I/O: the node now names a block device no driver registered
            # (ENXIO), so it can never reach a loop device reused later.
            node = os.path.join(root, 'dev', name)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(node)
            os.mknod(node, 0o660 | 0o060000, OFFLINE_RDEV)
            detach_loop(loop, backing)
            with open(os.path.join(root, 'sys', 'block', name, 'device',
                                   'state'), 'w') as f:
                f.write('transport-offline\n')
            with fakes.fabric_db(self.db) as conn:
                conn.execute("UPDATE devices SET state = 'offline' WHERE "
                             "host = ? AND name = ?", (host, name))
                fakes.record(conn, 'kernel', 'path-lost', host, device=name,
                             masked=masked, zoned=zoned)

    # -- main loop ---------------------------------------------------------

    def run(self):
        signal.signal(signal.SIGTERM, self._stop)
        with fakes.fabric_db(self.db) as conn:
            fakes.record(conn, 'kernel', 'started', pid=os.getpid())
        while not self.stopping:
            try:
                self.refresh_watches()
                ready, _w, _x = select.select(list(self.fifos), [], [],
                                              self.TICK)
                for fd in ready:
                    if fd not in self.fifos:
                        continue
                    kind, host, key, _path = self.fifos[fd]
                    try:
                        data = os.read(fd, 4096).decode(errors='replace')
                    except BlockingIOError:
                        continue
                    self.handle(kind, host, key, data)
                self.reconcile()
            except Exception:
                with fakes.fabric_db(self.db) as conn:
                    fakes.record(conn, 'kernel', 'error',
                                 traceback=traceback.format_exc())
                time.sleep(self.TICK)
        self.shutdown()

    def _stop(self, signum, frame):
        self.stopping = True

    def shutdown(self):
        """Detach every loop device this kernel attached."""
        with fakes.fabric_db(self.db) as conn:
            rows = conn.execute("SELECT loop, backing FROM devices WHERE "
                                "state = 'running'").fetchall()
            conn.execute("UPDATE devices SET state = 'offline' WHERE "
                         "state = 'running'")
        for loop, backing in rows:
            detach_loop(loop, backing)
        for path in list(self.paths):
            self._unwatch(path)


def detach_loop(loop, backing):
    """``losetup -d`` a loop device we attached, only if still ours."""
    if not loop:
        return
    name = os.path.basename(loop)
    try:
        with open('/sys/block/%s/loop/backing_file' % name) as f:
            current = f.read().strip()
    except OSError:
        return  # already detached
    if current.replace(' (deleted)', '') != backing:
        return  # the number was reused by someone else
    subprocess.run(['losetup', '-d', loop], capture_output=True)


def kernel_main(fabric_dir):
    FabricKernel(fabric_dir).run()


# -- the emulated hosts -------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_PR_SET_PDEATHSIG = 1


def _mount(source, target, flags):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source and source.encode(), target.encode(), None, flags,
                  None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, '%s: %s' % (target, os.strerror(err)))


def enter_host_namespace(fabric_dir, host):
    """Become *host*: private mounts with its emulated /sys and /dev.

    Call in a single-threaded child (after fork, or a fresh process).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, 'unshare(CLONE_NEWNS): %s' % os.strerror(err))
    _mount(None, '/', _MS_REC | _MS_PRIVATE)
    root = host_root(fabric_dir, host)
    _mount(os.path.join(root, 'sys'), '/sys', _MS_BIND | _MS_REC)
    _mount(os.path.join(root, 'dev'), '/dev', _MS_BIND | _MS_REC)
    _mount(os.path.join(root, 'scsi_id'), '/lib/udev/scsi_id', _MS_BIND)


def start_privsep():
    """Run os-brick's privileged calls in a forked privsep daemon.

    Without this, the default (rootwrap + sudo, absent here) makes
    disconnect_volume "succeed" without running anything.
    """
    from os_brick import privileged
    from oslo_privsep import priv_context
    context = privileged.default  # the FC connector's only context
    context.channel = None  # never reuse a parent's daemon after a fork
    context.set_client_mode(True)
    context.start(priv_context.Method.FORK)


def stop_privsep():
    from os_brick import privileged
    privileged.default.stop()


def fc_connector(device_scan_attempts=3):
    """os-brick's real FibreChannelConnector, as Cinder and Nova get it."""
    from os_brick.initiator import connector
    return connector.InitiatorConnector.factory(
        'FIBRE_CHANNEL', 'sudo', use_multipath=False,
        device_scan_attempts=device_scan_attempts)


def _host_op(op, args):
    """One operation of an emulated host, inside its namespace."""
    if op == 'properties':
        from os_brick.initiator.connectors import fibre_channel
        return fibre_channel.FibreChannelConnector.get_connector_properties(
            'sudo')
    if op == 'connect':
        return fc_connector(args.get('attempts', 3)).connect_volume(
            args['data'])
    if op == 'disconnect':
        fc_connector().disconnect_volume(
            args['data'], args.get('device_info'), force=args.get('force'),
            ignore_errors=args.get('ignore_errors'))
        return None
    if op in ('write', 'read'):
        try:
            fd = os.open(args['path'], os.O_RDWR)
            try:
                if op == 'write':
                    os.pwrite(fd, bytes.fromhex(args['data']),
                              args['offset'])
                    os.fsync(fd)
                    return {'ok': True}
                return {'ok': True, 'data': os.pread(
                    fd, args['length'], args['offset']).hex()}
            finally:
                os.close(fd)
        except OSError as err:
            return {'ok': False, 'errno': errno.errorcode.get(err.errno),
                    'error': str(err)}
    if op == 'ls':
        return sorted(os.listdir('/dev/disk/by-path'))
    if op == 'force-detach':
        return _force_detach(args)
    raise ValueError('unknown host operation %s' % op)


def _force_detach(args):
    """Cinder volume service's driver.force_detach, run on this host.

    A fresh process (no eventlet, no forked service threads) configured
    as the test's volume service: the same Cinder database file, tooz
    backend, array file and zone manager.  ``crash_after`` names a flow
    task that raises right after it did its work (a simulated crash).

    SQLite may refuse this process's database reset at once ("database
    is locked": a write of the test process's in-process services at the
    same moment, which SQLite answers without waiting to avoid a
    deadlock; seen twice in clean-clone runs).  The flow then fails clean
    (the database unchanged) and, as an operator would, the child runs
    the idempotent force-detach again, up to 5 times.
    """
    from cinder import objects
    objects.register_all()  # before anything that imports cinder.volume
    from cinder import context
    from cinder import coordination
    from cinder.volume import configuration
    from cinder.volume import driver as volume_driver

    from cinder_forcedetach.drivers import fc
    from cinder_forcedetach.flows import force_detach as flow

    configuration.Configuration(
        volume_driver.volume_opts,
        config_group=configuration.SHARED_CONF_GROUP).append_config_values(
            fc.FibreChannelDriver.get_driver_options())
    for group, values in args['config'].items():
        for name, value in values.items():
            cfg.CONF.set_override(name, value,
                                  None if group == 'DEFAULT' else group)
    if args.get('crash_after'):
        step = getattr(flow, args['crash_after'])
        real = step.execute

        def crashing(self, *a, **kw):
            real(self, *a, **kw)
            raise RuntimeError('crash after %s' % step.__name__)
        step.execute = crashing
    coordination.COORDINATOR.start()
    try:
        ctxt = context.get_admin_context()
        driver = fc.FibreChannelDriver(
            configuration=configuration.Configuration(
                volume_driver.volume_opts, config_group='fc_host_child'))
        driver.do_setup(ctxt)
        for attempt in range(5):
            try:
                driver.force_detach(ctxt, objects.Volume.get_by_id(
                    ctxt, args['volume_id']), **args.get('kwargs', {}))
                return
            except Exception as err:
                if 'database is locked' not in str(err) or attempt == 4:
                    raise
                time.sleep(1)
    finally:
        coordination.COORDINATOR.stop()


class CommandRecorder(pylogging.Handler):
    """Appends every command os-brick runs to the host's ``commands.log``.

    The handler is installed before the privsep daemon forks, so the
    daemon keeps a copy: its lines (``privileged``: run by a process other
    than the caller) prove the privileged commands really ran.
    """

    def __init__(self, path):
        super(CommandRecorder, self).__init__(pylogging.DEBUG)
        self.path = path
        self.caller = os.getpid()

    def emit(self, record):
        message = record.getMessage()
        if not message.startswith('Running cmd'):
            return
        line = json.dumps({'pid': os.getpid(),
                           'privileged': os.getpid() != self.caller,
                           'cmd': message.split(': ', 1)[-1]})
        with open(self.path, 'a') as f:
            f.write(line + '\n')

    @classmethod
    def install(cls, fabric_dir, host):
        recorder = cls(os.path.join(host_root(fabric_dir, host),
                                    'commands.log'))
        root = pylogging.getLogger()
        root.addHandler(recorder)
        root.setLevel(pylogging.DEBUG)
        pylogging.getLogger('oslo_concurrency.processutils').setLevel(
            pylogging.DEBUG)
        return recorder


def run_host_op(fabric_dir, host, op, args):
    """Run *op* as *host*, in this (fresh, single-threaded) process.

    Returns ``{'ok': True, 'result': ...}`` or the error's type, message
    and traceback.
    """
    import os_brick
    from oslo_concurrency import lockutils
    from oslo_log import log as logging
    conf = cfg.CONF
    logging.register_options(conf)
    conf([], project='fc-fabric-host')
    logging.setup(conf, 'fc-fabric-host')
    lock_dir = os.path.join(fabric_dir, 'locks', host)
    os.makedirs(lock_dir, exist_ok=True)
    lockutils.set_defaults(lock_dir)
    os_brick.setup(conf)
    CommandRecorder.install(fabric_dir, host)
    enter_host_namespace(fabric_dir, host)
    start_privsep()
    try:
        return {'ok': True, 'result': _host_op(op, args)}
    except Exception as err:
        return {'ok': False, 'type': type(err).__name__, 'error': str(err),
                'traceback': traceback.format_exc()}
    finally:
        stop_privsep()


def _preload():
    """Import what the host operations import, in the zygote.

    A child forked from the zygote starts with these modules loaded
    (importing Cinder's objects alone takes ~3 s here): the same state
    as a fresh process that imported them, since importing starts no
    thread and parses no configuration.
    """
    from cinder import objects
    objects.register_all()  # before anything that imports cinder.volume
    from cinder import context  # noqa: F401
    from cinder import coordination  # noqa: F401
    from cinder.volume import configuration  # noqa: F401
    from cinder.volume import driver  # noqa: F401
    import os_brick  # noqa: F401
    from os_brick.initiator import connector  # noqa: F401
    from os_brick.initiator.connectors import fibre_channel  # noqa: F401
    from oslo_concurrency import lockutils  # noqa: F401
    from oslo_log import log  # noqa: F401
    from oslo_privsep import priv_context  # noqa: F401

    from cinder_forcedetach.drivers import fc  # noqa: F401
    from cinder_forcedetach.flows import force_detach  # noqa: F401


def zygote_socket(fabric_dir):
    return os.path.join(fabric_dir, 'zygote.sock')


def zygote_main(fabric_dir):
    """Fork a fresh host process per call, with the imports done once.

    Each connection carries one JSON request line (host, op, args); the
    zygote forks a child that answers its pid, then the result, and
    exits.  The child's stdout and stderr go to ``calls/N.log``, whose
    path the pid line names.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)  # ends with its test
    _preload()
    if threading.active_count() != 1:
        raise SystemExit('the zygote must be single-threaded to fork: %s'
                         % threading.enumerate())
    calls = os.path.join(fabric_dir, 'calls')
    os.makedirs(calls, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound under another name and renamed once listening: a client that
    # sees the socket can connect.
    listener.bind(zygote_socket(fabric_dir) + '.new')
    listener.listen(16)
    os.rename(zygote_socket(fabric_dir) + '.new', zygote_socket(fabric_dir))
    for number in itertools.count(1):
        conn, _addr = listener.accept()
        log_path = os.path.join(calls, '%d.log' % number)
        pid = os.fork()
        if pid == 0:
            listener.close()
            _zygote_child(fabric_dir, conn, log_path)
        conn.close()
        while True:  # reap the children that ended
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def _zygote_child(fabric_dir, conn, log_path):
    status = 1
    try:
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        conn.sendall(json.dumps({'pid': os.getpid(),
                                 'log': log_path}).encode() + b'\n')
        request = json.loads(conn.makefile('rb').readline())
        result = run_host_op(fabric_dir, request['host'], request['op'],
                             request['args'])
        conn.sendall(json.dumps(result).encode() + b'\n')
        status = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


class HostError(Exception):
    """An emulated host's operation failed; carries os-brick's error."""

    def __init__(self, result):
        self.type = result.get('type')
        super(HostError, self).__init__(
            '%s: %s\n%s' % (result.get('type'), result.get('error'),
                            result.get('traceback', '')))


class EmulatedHost(object):
    """A host with FC HBAs on the emulated fabric."""

    def __init__(self, fabric, name, hbas):
        self.fabric = fabric
        self.name = name
        self.hbas = hbas
        self.wwpns = [h['wwpn'] for h in hbas]

    def call(self, op, timeout=120, **args):
        """Run *op* in a fresh process in this host's namespace.

        The fabric's zygote forks the process (see :func:`zygote_main`).
        """
        started = {}
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout)
                sock.connect(self.fabric.zygote_ready())
                replies = sock.makefile('rb')
                started = json.loads(replies.readline())
                sock.sendall(json.dumps({'host': self.name, 'op': op,
                                         'args': args}).encode() + b'\n')
                line = replies.readline()
        except (OSError, ValueError) as err:
            # socket.timeout is an OSError: the process is stopped.
            if started.get('pid'):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(started['pid'], signal.SIGKILL)
            raise RuntimeError('host %s %s failed: %s: %s' % (
                self.name, op, err, self._log_tail(started)))
        try:
            result = json.loads(line)
        except ValueError:
            raise RuntimeError('host %s %s ended with no result: %s' % (
                self.name, op, self._log_tail(started)))
        if not result['ok']:
            raise HostError(result)
        return result['result']

    @staticmethod
    def _log_tail(started):
        try:
            with open(started['log']) as f:
                return f.read()[-3000:]
        except (KeyError, OSError):
            return '(no log)'

    def connector(self, **extra):
        """The connector Nova would send: os-brick's properties + host."""
        props = self.call('properties')
        connector = {'host': self.name, 'platform': 'x86_64',
                     'os_type': 'linux', 'multipath': False, 'ip': '127.0.0.1',
                     'initiator': 'iqn.2026-11.org.example:%s' % self.name}
        connector.update(props)
        connector.update(extra)
        return connector

    def connect(self, connection_info, attempts=2):
        return self.call('connect', data=_data(connection_info),
                         attempts=attempts)

    def disconnect(self, connection_info, device_info=None, force=True,
                   ignore_errors=True):
        return self.call('disconnect', data=_data(connection_info),
                         device_info=device_info, force=force,
                         ignore_errors=ignore_errors)

    def write(self, path, data, offset=0):
        return self.call('write', path=path, data=data.hex(), offset=offset)

    def read(self, path, length, offset=0):
        result = self.call('read', path=path, length=length, offset=offset)
        if result['ok']:
            result['data'] = bytes.fromhex(result['data'])
        return result

    def force_detach(self, config, volume_id, crash_after=None, **kwargs):
        """Run the driver's force-detach as this host's volume service."""
        return self.call('force-detach', config=config, volume_id=volume_id,
                         crash_after=crash_after, kwargs=kwargs)

    def by_path(self):
        return self.call('ls')

    def commands(self, privileged=None):
        """Commands os-brick ran on this host so far (oldest first)."""
        path = os.path.join(host_root(self.fabric.dir, self.name),
                            'commands.log')
        if not os.path.exists(path):
            return []
        with open(path) as f:
            entries = [json.loads(line) for line in f if line.strip()]
        return [e['cmd'] for e in entries
                if privileged is None or e['privileged'] == privileged]


def _data(connection_info):
    return connection_info.get('data', connection_info)


class EmulatedFabric(fixtures.Fixture):
    """Switch + array target ports + a kernel process, torn down after."""

    def __init__(self, array_db, volumes_dir, target_wwpns):
        super(EmulatedFabric, self).__init__()
        self.array_db = array_db
        self.volumes_dir = volumes_dir
        self.target_wwpns = fakes.normalize_wwpns(target_wwpns)
        self.hosts = {}

    def _setUp(self):
        self.dir = self.useFixture(fixtures.TempDir()).path
        self.db = os.path.join(self.dir, 'fabric.sqlite')
        self.state = fakes.FabricState(self.db)
        fakes.create_fabric_db(self.db, self.array_db, self.volumes_dir,
                               self.target_wwpns)
        # Cleanups run last-in first-out: stop the kernel, then make sure
        # no loop device of ours is left.
        self.addCleanup(self._detach_leftover_loops)
        log = open(os.path.join(self.dir, 'kernel.log'), 'ab')
        self.addCleanup(log.close)
        self.kernel = subprocess.Popen(
            [sys.executable, '-m', __name__, 'kernel', self.dir],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        self.addCleanup(self._stop, self.kernel)
        # Each host operation is a fresh process forked by the zygote.
        self.zygote = subprocess.Popen(
            [sys.executable, '-m', __name__, 'zygote', self.dir],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        self.addCleanup(self._stop, self.zygote)
        self.wait_for(lambda: self.state.events(op='started'),
                      'the fabric kernel to start')

    def zygote_ready(self):
        """The zygote's socket, once it listens (it imports meanwhile)."""
        path = zygote_socket(self.dir)
        self.wait_for(lambda: os.path.exists(path),
                      'the host zygote to listen', timeout=60,
                      gone=lambda: self._exited(self.zygote, 'host zygote'))
        return path

    @staticmethod
    def _stop(proc):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    @staticmethod
    def _exited(proc, what):
        if proc.poll() is not None:
            return 'the %s exited (%s)' % (what, proc.returncode)

    def _detach_leftover_loops(self):
        with fakes.fabric_db(self.db) as conn:
            rows = conn.execute('SELECT loop, backing FROM devices').fetchall()
        for loop, backing in rows:
            detach_loop(loop, backing)

    def wait_for(self, predicate, what, timeout=10, gone=None):
        return waiting.wait_for(
            predicate, timeout, what, interval=0.02,
            gone=gone or (lambda: self._exited(self.kernel, 'fabric kernel')))

    def settle(self):
        """Wait until the kernel has handled everything written so far."""
        mark = self.state.last_event_id()
        time.sleep(FabricKernel.TICK * 3)
        return mark

    def add_host(self, name, n_hbas=1):
        """A host whose HBAs log in to the fabric."""
        digest = hashlib.sha256(name.encode()).hexdigest()
        with fakes.fabric_db(self.db) as conn:
            next_no = conn.execute('SELECT COALESCE(MAX(host_no), 4) + 1 '
                                   'FROM hbas').fetchone()[0]
            hbas = []
            for i in range(n_hbas):
                hba = {'host': name, 'host_no': next_no + i,
                       'wwpn': '10000090fa%s%d' % (digest[:5], i),
                       'wwnn': '20000090fa%s%d' % (digest[:5], i),
                       'pci': '0000:05:00.%d' % (2 + i)}
                conn.execute('INSERT INTO hbas VALUES (?, ?, ?, ?, ?)',
                             (name, hba['host_no'], hba['wwpn'], hba['wwnn'],
                              hba['pci']))
                conn.execute("INSERT OR REPLACE INTO ports VALUES (?, "
                             "'initiator', 1)", (hba['wwpn'],))
                hbas.append(hba)
        build_host_tree(self.dir, name, hbas)
        self.hosts[name] = EmulatedHost(self, name, hbas)
        return self.hosts[name]


def main(argv):
    if argv[1] == 'kernel':
        kernel_main(argv[2])
    elif argv[1] == 'zygote':
        zygote_main(argv[2])
    else:
        raise SystemExit('usage: fc_fabric kernel DIR | zygote DIR')


if __name__ == '__main__':
    main(sys.argv)
