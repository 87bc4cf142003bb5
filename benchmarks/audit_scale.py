#!/usr/bin/env python3
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

"""``cinder-forcedetach audit`` at scale: its read + classify pass, timed.

For each size N (``--sizes``, default 10000,50000,100000 live attachments
over N/2 volumes) the script builds the three sources the audit reads and
runs, in a fresh process per size, the code path of
:func:`cinder_forcedetach.cmd.audit.audit` without ``--fix``:
``sources.CinderDB(...).read()``, ``sources.read_backend`` on our
``TgtISCSIDriver`` (its ``audit_holders``: ``VolumeExports.holders`` over
``parse_targets``), ``sources.attach_holders``, ``sources.read_nova_file``,
``cases.Snapshot`` and ``cases.classify`` (grace 600 s, the CLI default).

What is real and what is generated:

* **Cinder's database: real schema, generated rows.**  A SQLite file made
  by Cinder's own migrations (``cinder.db.migration.db_sync``), rows
  inserted in bulk (SQLAlchemy core executemany) into ``volumes``,
  ``volume_attachment`` and ``volume_admin_metadata``, plus deleted volumes
  (10 %) and detached or deleted attachment rows; read back through
  Cinder's engine (``[database] connection``) and models.
* **Backend: a real tgtd for the first ``--real-targets`` targets**
  (default 2000; Debian tgtd on 127.0.0.1, free control and iSCSI ports,
  LUN 1 on one shared sparse file, one ACL per attached initiator; no
  sessions, no CHAP accounts: no initiator logs in), listed by a real
  ``tgtadm --op show --mode target``, **plus a synthetic listing for the
  rest** in the same text format (checked line for line against the real
  daemon's listing of its first target), with I_T nexus sessions and CHAP
  account names.  Both are parsed together by our real parser: the parse
  cost is real, the cost of tgtd listing the synthetic targets is not.
* **Nova: a generated JSON file** read by ``sources.read_nova_file`` (what
  ``--nova-file`` reads; Nova's API is not measured).

Each block of 50 volumes / 100 attachments holds one seed of each case the
three sources can show (1 % of the attachments per case): leaked_export (a
stranger's ACL and session, a deleted volume's target, a target no volume
names, in turn), attached_not_exported, attachment_without_bdm,
bdm_without_attachment, reserved_orphan, stuck_transition,
in_use_without_attachment and interrupted_force_detach (a teardown record
in the admin metadata); the rest is consistent (multiattach, migrated
volumes' name ids, shelved-offloaded reservations, available volumes).
stale_fence is not seeded: tgt records no fences.  Findings are compared
with the seeds by (case, volume, attachment): found, missed and false
positives per case.

Peak RSS is the measuring process's high-water mark (``VmHWM``; its
``ru_maxrss`` would include the parent's peak, inherited across exec),
imports included (the RSS after imports is shown too), read before the
seeds are loaded for the comparison.  Goals: < 5 s and < 500 MB at 100k
attachments, every seed found, no false positive.

Usage: .venv/bin/python benchmarks/audit_scale.py
           [--sizes 10000,50000,100000] [--real-targets 2000] [--keep]
Needs root and tgt (tools/install-deps.sh).  Sizes are multiples of 100.
"""

import argparse
import collections
import concurrent.futures
import datetime
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

NAME_TEMPLATE = 'volume-%s'
TARGET_PREFIX = 'iqn.2010-10.org.openstack:'
BACKEND_GROUP = 'bench_audit'
SERVICE_HOST = 'bench'
BACKEND = '%s@%s' % (SERVICE_HOST, BACKEND_GROUP)
GRACE = 600                       # the CLI's default --grace
HOSTS = 1000                      # compute hosts
BLOCK_VOLUMES = 50
BLOCK_ATTACHMENTS = 100
DELETED_PER_BLOCK = 5
INSERT_CHUNK = 10000
TGTADM_WORKERS = 4
CHILD_TIMEOUT = 900

GOAL_SECONDS = 5.0
GOAL_RSS_MB = 500.0
GOAL_SIZE = 100000

# Slot of a volume in its block -> the case seeded there.
SEED_SLOTS = {0: 'leaked_export', 1: 'attached_not_exported',
              2: 'attachment_without_bdm', 3: 'bdm_without_attachment',
              4: 'reserved_orphan', 5: 'stuck_transition',
              6: 'in_use_without_attachment',
              15: 'interrupted_force_detach'}
SHELVED_SLOT = 7
AVAILABLE_SLOT = 8
# Live attachments per slot (the rest: 2); a block sums to 100.
ATTACHMENTS_OF_SLOT = {4: 1, 6: 0, SHELVED_SLOT: 1, AVAILABLE_SLOT: 0}
ATTACHMENTS_OF_SLOT.update((s, 3) for s in range(9, 15))
SEEDED_CASES = tuple(SEED_SLOTS[s] for s in sorted(SEED_SLOTS))
NOT_SEEDED = {'stale_fence': 'tgt records no fences'}
# cinder_forcedetach.attachments.TEARDOWN_MARK (the parent does not import
# the audit's code).
TEARDOWN_MARK = 'forcedetach_teardown'


def uid(*parts):
    """A stable UUID (the same volume index gives the same id at any N)."""
    digest = hashlib.md5(repr(parts).encode()).digest()
    return str(uuid.UUID(bytes=digest, version=4))


# -- the generated fleet ------------------------------------------------------

Target = collections.namedtuple('Target', ['name', 'acls', 'sessions',
                                           'account', 'path'])


class Host(collections.namedtuple('Host', ['name', 'initiator', 'ip'])):

    @classmethod
    def of(cls, index):
        index %= HOSTS
        return cls('compute-%04d' % index,
                   'iqn.1994-05.com.redhat:compute-%04d' % index,
                   '10.20.%d.%d' % (index // 250, index % 250 + 1))

    def connector(self):
        return {'platform': 'x86_64', 'os_type': 'linux',
                'ip': self.ip, 'host': self.name, 'multipath': False,
                'initiator': self.initiator, 'do_local_attach': False,
                'system uuid': uid('system', self.name)}


class Fleet(object):
    """Cinder rows, tgt targets and Nova mappings of N attachments.

    A pure function of each volume's index: the first targets (those on
    the real tgtd) are the same at every size.
    """

    def __init__(self, attachments, volume_type_id, now):
        if attachments <= 0 or attachments % BLOCK_ATTACHMENTS:
            raise ValueError('sizes must be positive multiples of %d' %
                             BLOCK_ATTACHMENTS)
        self.n = attachments
        self.type_id = volume_type_id
        self.old = now - datetime.timedelta(days=3)
        self.volumes, self.attachments, self.metadata = [], [], []
        self.bdms, self.instances = [], {}
        self.targets, self.expected = [], []
        #: names of the targets a seed is on (a leak, a missing ACL)
        self.seeded_targets = set()
        self.live_attachments = 0
        for block in range(attachments // BLOCK_ATTACHMENTS):
            for slot in range(BLOCK_VOLUMES):
                self._volume(block, slot)
            for d in range(DELETED_PER_BLOCK):
                self._deleted(block, d)
        assert self.live_attachments == attachments, self.live_attachments

    # -- rows -----------------------------------------------------------------

    def _volume_row(self, vid, status, attach_status, **extra):
        row = {'id': vid, '_name_id': None, 'use_quota': True,
               'user_id': uid('user', vid[:2]),
               'project_id': uid('project', vid[:2]).replace('-', ''),
               'host': '%s#%s' % (BACKEND, BACKEND_GROUP), 'size': 10,
               'availability_zone': 'nova', 'status': status,
               'attach_status': attach_status,
               'display_name': 'vol-%s' % vid[:8],
               'provider_location': '127.0.0.1:3260 %svolume-%s 1' % (
                   TARGET_PREFIX, vid),
               'volume_type_id': self.type_id, 'bootable': False,
               'multiattach': False, 'shared_targets': False,
               'deleted': False, 'deleted_at': None,
               'created_at': self.old, 'updated_at': self.old}
        row.update(extra)
        self.volumes.append(row)
        return row

    def _attachment_row(self, aid, vid, instance, host, status='attached',
                        deleted=False, mountpoint='/dev/vdb'):
        connector = connection = None
        if host is not None and status != 'reserved':
            connector = json.dumps(host.connector())
            connection = json.dumps({
                'driver_volume_type': 'iscsi', 'data': {
                    'target_discovered': False,
                    'target_portal': '127.0.0.1:3260',
                    'target_iqn': '%svolume-%s' % (TARGET_PREFIX, vid),
                    'target_lun': 1, 'volume_id': vid,
                    'auth_method': 'CHAP', 'discard': True}})
        self.attachments.append({
            'id': aid, 'volume_id': vid, 'instance_uuid': instance,
            'attached_host': host.name if connector else None,
            'mountpoint': mountpoint if connector else None,
            'attach_time': self.old if connector else None,
            'detach_time': self.old if status == 'detached' else None,
            'attach_status': status, 'attach_mode': 'rw',
            'connection_info': connection, 'connector': connector,
            'deleted': deleted, 'deleted_at': self.old if deleted else None,
            'created_at': self.old, 'updated_at': self.old})
        if not deleted and status not in ('detached', 'deleted'):
            self.live_attachments += 1

    def _metadata(self, vid, attached):
        for key, value in (('readonly', 'False'),) + (
                (('attached_mode', 'rw'),) if attached else ()):
            self.metadata.append({'volume_id': vid, 'key': key,
                                  'value': value, 'deleted': False,
                                  'created_at': self.old,
                                  'updated_at': self.old})

    def _bdm(self, instance, vid, attachment_id, state, host):
        self.instances[instance] = state
        self.bdms.append({'instance_uuid': instance, 'volume_id': vid,
                          'attachment_id': attachment_id,
                          'vm_state': state, 'host': host.name})

    def _expect(self, case, volume, attachment=None):
        self.expected.append((case, volume, attachment))

    # -- one volume -----------------------------------------------------------

    def _volume(self, block, slot):
        i = block * BLOCK_VOLUMES + slot
        vid = uid('volume', i)
        count = ATTACHMENTS_OF_SLOT.get(slot, 2)
        case = SEED_SLOTS.get(slot)
        # Healthy attachments: instance (i // 3, k) has three volumes.
        group = i // 3
        hosts = [Host.of(group * 7 + k * 13) for k in range(count)]
        shared = slot != SHELVED_SLOT and case in (
            None, 'leaked_export', 'attached_not_exported',
            'bdm_without_attachment', 'stuck_transition',
            'interrupted_force_detach')
        instances = [uid('instance', group, k) if shared else
                     uid('special-instance', i, k) for k in range(count)]
        atts = [uid('attachment', i, k) for k in range(count)]
        name_id = uid('name-id', i) if slot >= 15 and i % 25 == 0 else None

        if slot == AVAILABLE_SLOT:
            self._volume_row(vid, 'available', 'detached')
            self._metadata(vid, False)
            return
        if slot == SHELVED_SLOT or case == 'reserved_orphan':
            # Attachment API create without connector: a reservation.
            self._volume_row(vid, 'reserved', 'detached')
            self._metadata(vid, False)
            self._attachment_row(atts[0], vid, instances[0], hosts[0],
                                 status='reserved')
            if slot == SHELVED_SLOT:
                self._bdm(instances[0], vid, atts[0], 'shelved_offloaded',
                          hosts[0])
            else:
                if block % 2:
                    self.instances[instances[0]] = 'deleted'
                self._expect(case, vid, atts[0])
            return
        if case == 'in_use_without_attachment':
            self._volume_row(vid, 'in-use', 'attached')
            self._metadata(vid, True)
            # Its attachment row ended (deleted, or detached and kept).
            self._attachment_row(uid('ended', i), vid,
                                 uid('ended-instance', i), Host.of(group),
                                 status='detached',
                                 deleted=bool(block % 2))
            self._expect(case, vid)
            return

        status = 'in-use'
        if case == 'stuck_transition':
            status = 'detaching' if block % 2 else 'attaching'
            self._expect(case, vid)
        self._volume_row(vid, status, 'attached', _name_id=name_id,
                         multiattach=count > 1)
        self._metadata(vid, True)
        if case == 'interrupted_force_detach':
            # The record of a force-detach of one host that never finished.
            self.metadata.append({
                'volume_id': vid, 'key': TEARDOWN_MARK,
                'value': json.dumps([hosts[1].connector()]),
                'deleted': False, 'created_at': self.old,
                'updated_at': self.old})
            self._expect(case, vid)
        for k in range(count):
            self._attachment_row(atts[k], vid, instances[k], hosts[k],
                                 mountpoint='/dev/vd%s' % 'bcdefgh'[i % 7])
        for k in range(count):
            if case == 'attachment_without_bdm' and k == 1:
                if block % 2:
                    self.instances[instances[k]] = 'active'
                self._expect(case, vid, atts[k])
                continue
            state = 'stopped' if (i + k) % 10 == 0 else 'active'
            self._bdm(instances[k], vid, atts[k] if (i + k) % 2 else None,
                      state, hosts[k])
        if case == 'bdm_without_attachment':
            ghost = uid('ghost-attachment', i) if block % 2 else None
            self._bdm(uid('ghost-instance', i), vid, ghost, 'active',
                      Host.of(i))
            self._expect(case, vid, ghost)

        initiators = [h.initiator for h in hosts]
        granted = initiators[:1] if case == 'attached_not_exported' else \
            initiators
        if case == 'attached_not_exported':
            self._expect(case, vid, atts[1])
            self.seeded_targets.add(NAME_TEMPLATE % (name_id or vid))
        sessions = [ini for k, ini in enumerate(granted) if (i + k) % 2]
        self.targets.append(Target(
            NAME_TEMPLATE % (name_id or vid), granted, sessions,
            'chap%s' % uid('chap', i).replace('-', '')[:16],
            '/dev/cinder-volumes/%s' % (NAME_TEMPLATE % (name_id or vid))))
        if case == 'leaked_export':
            self._leak(block, i, vid)

    def _leak(self, block, i, vid):
        """One leaked export per block, three kinds in turn."""
        stranger = Host.of((i // 3) * 7 + 500)
        kind = block % 3
        if kind == 0:
            # A host that has no attachment is still let in.
            target = self.targets[-1]
            target.acls.append(stranger.initiator)
            target.sessions.append(stranger.initiator)
            self.seeded_targets.add(target.name)
            self._expect('leaked_export', vid)
            return
        if kind == 1:
            # The volume was deleted, its export was not.
            name, key = NAME_TEMPLATE % uid('deleted', block, 0), \
                uid('deleted', block, 0)
        else:
            # A target named like a volume no Cinder row has.
            name = NAME_TEMPLATE % uid('unknown', block)
            key = 'name:%s' % name
        self.targets.append(Target(name, [stranger.initiator],
                                   [stranger.initiator], None,
                                   '/dev/cinder-volumes/%s' % name))
        self.seeded_targets.add(name)
        self._expect('leaked_export', key)

    def _deleted(self, block, d):
        vid = uid('deleted', block, d)
        self._volume_row(vid, 'deleted', 'detached', deleted=True,
                         deleted_at=self.old)
        self._attachment_row(uid('deleted-attachment', block, d), vid,
                             uid('deleted-instance', block, d),
                             Host.of(block + d), status='detached',
                             deleted=True)

    def nova(self):
        return {'instances': self.instances, 'bdms': self.bdms}


# -- the tgt listing ----------------------------------------------------------

def _lun_lines(tid, lun, kind, size, store, path):
    return ['        LUN: %d' % lun,
            '            Type: %s' % kind,
            '            SCSI ID: IET     %04x%04x' % (tid, lun),
            '            SCSI SN: beaf%d%d' % (tid, lun),
            '            Size: %s, Block size: %d' % size,
            '            Online: Yes',
            '            Removable media: No',
            '            Prevent removal: No',
            '            Readonly: No',
            '            SWP: No',
            '            Thin-provisioning: No',
            '            Backing store type: %s' % store,
            '            Backing store path: %s' % path,
            '            Backing store flags: ']


def render(tid, target, path=None, sessions=True, account=True):
    """A target as ``tgtadm --op show --mode target`` prints it."""
    lines = ['Target %d: %s%s' % (tid, TARGET_PREFIX, target.name),
             '    System information:',
             '        Driver: iscsi',
             '        State: ready',
             '    I_T nexus information:']
    if sessions:
        for n, initiator in enumerate(target.sessions):
            lines += ['        I_T nexus: %d' % (tid * 4 + n),
                      '            Initiator: %s alias: %s' % (
                          initiator, initiator.rsplit(':', 1)[-1]),
                      '            Connection: 0',
                      '                IP Address: 10.20.0.1']
    lines += ['    LUN information:']
    lines += _lun_lines(tid, 0, 'controller', ('0 MB', 1), 'null', 'None')
    lines += _lun_lines(tid, 1, 'disk', ('1074 MB', 512), 'rdwr',
                        path or target.path)
    lines += ['    Account information:']
    if account and target.account:
        lines += ['        %s' % target.account]
    lines += ['    ACL information:']
    lines += ['        %s' % acl for acl in target.acls]
    return '\n'.join(lines) + '\n'


class RealTgtd(object):
    """The real tgtd: started on free ports, killed by its pid."""

    def __init__(self, workdir):
        from tests.support import tgtd as tgtd_daemon
        self.daemon = tgtd_daemon.Tgtd(workdir)
        self.backing = os.path.join(workdir, 'shared-lun.img')
        self.started = False

    def start(self):
        with open(self.backing, 'wb') as f:
            f.truncate(1 << 30)
        self.daemon.start()
        self.started = True

    def tgtadm(self, *args):
        res = self.daemon.tgtadm(*args, check=False)
        if res.returncode:
            raise RuntimeError('tgtadm %s: %s' % (' '.join(args),
                                                  res.stderr.strip()))

    def create(self, tid, target):
        self.tgtadm('--op', 'new', '--mode', 'target', '--tid', str(tid),
                    '--targetname', TARGET_PREFIX + target.name)
        self.tgtadm('--op', 'new', '--mode', 'logicalunit', '--tid',
                    str(tid), '--lun', '1', '--backing-store', self.backing)
        for acl in target.acls:
            self.tgtadm('--op', 'bind', '--mode', 'target', '--tid',
                        str(tid), '--initiator-name', acl)

    def create_all(self, targets):
        with concurrent.futures.ThreadPoolExecutor(TGTADM_WORKERS) as pool:
            list(pool.map(lambda t: self.create(*t),
                          enumerate(targets, start=1)))

    def listing(self):
        return self.daemon.tgtadm('--op', 'show', '--mode', 'target').stdout

    def stop(self):
        """SIGKILL our tgtd (it ignores SIGTERM), remove its socket files."""
        if not self.started:
            return
        proc = self.daemon.proc
        if proc is not None and proc.poll() is None:
            self.daemon.kill()
        from tests.support import tgtd as tgtd_daemon
        for suffix in ('', '.lock'):
            path = os.path.join(tgtd_daemon.TGTD_SOCKET_DIR, 'socket.%d%s' % (
                self.daemon.control_port, suffix))
            if os.path.exists(path):
                os.unlink(path)


def check_format(real, targets, backing):
    """Differences between the real listing and ours of the same targets."""
    from cinder_forcedetach.targets import tgtadm
    parsed = tgtadm.parse_targets(real)
    ours = ''.join(render(state.tid, targets[state.tid - 1], path=backing,
                          sessions=False, account=False)
                   for state in sorted(parsed.values(), key=lambda s: s.tid))
    real_lines = sorted(real.splitlines())
    our_lines = sorted(ours.splitlines())
    if real_lines == our_lines:
        return None
    diff = sorted(set(real_lines) ^ set(our_lines))
    return '%d differing lines, e.g. %r' % (len(diff), diff[:3])


# -- the database -------------------------------------------------------------

def make_schema(path):
    """An empty database made by Cinder's migrations; its volume type."""
    import sqlalchemy as sa

    from cinder.db import migration

    engine = sa.create_engine('sqlite:///' + path)
    try:
        migration.db_sync(engine=engine)
        with engine.connect() as conn:
            type_id = conn.execute(sa.text(
                'SELECT id FROM volume_types WHERE deleted = 0 '
                'LIMIT 1')).scalar()
    finally:
        engine.dispose()
    if not type_id:
        raise RuntimeError('Cinder\'s migrations created no volume type')
    return type_id


def fill(path, fleet):
    import sqlalchemy as sa

    from cinder.db import models

    engine = sa.create_engine('sqlite:///' + path)
    try:
        with engine.begin() as conn:
            for table, rows in ((models.Volume.__table__, fleet.volumes),
                                (models.VolumeAttachment.__table__,
                                 fleet.attachments),
                                (models.VolumeAdminMetadata.__table__,
                                 fleet.metadata)):
                for start in range(0, len(rows), INSERT_CHUNK):
                    conn.execute(sa.insert(table),
                                 rows[start:start + INSERT_CHUNK])
    finally:
        engine.dispose()


# -- the measured pass (one fresh process per size) ---------------------------

def _status_mb(field):
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1]) / 1024.0
    return 0.0


def rss_mb():
    """Peak RSS of this process so far, in MB.

    ``VmHWM`` of /proc/self/status: ``getrusage(RUSAGE_SELF).ru_maxrss``
    also counts, on Linux, the peak of the image this process was
    exec'ed from (the forking parent, which holds the generated rows).
    """
    return _status_mb('VmHWM') or (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)


class ListingTarget(object):
    """The real tgtd's listing followed by the synthetic one.

    Stands in for ``TgtAdm`` under ``VolumeExports``: ``list_targets``
    runs the real ``tgtadm --op show --mode target`` (our privileged
    operation, in-process as root) and parses both listings together with
    :func:`~cinder_forcedetach.targets.tgtadm.parse_targets`.
    """

    def __init__(self, control_port, synthetic_path):
        self.control_port = control_port
        self.synthetic_path = synthetic_path
        self.times = {}
        self.sizes = {}

    def list_targets(self):
        from cinder_forcedetach.privileged import tgt as privileged_tgt
        from cinder_forcedetach.targets import tgtadm

        real = ''
        start = time.perf_counter()
        if self.control_port is not None:
            code, real, err = privileged_tgt.show_targets(self.control_port)
            if code:
                raise RuntimeError('tgtadm show: %s' % err.strip())
        self.times['tgtadm show'] = time.perf_counter() - start
        start = time.perf_counter()
        with open(self.synthetic_path) as f:
            synthetic = f.read()
        self.times['synthetic read'] = time.perf_counter() - start
        self.sizes = {'real': len(real), 'synthetic': len(synthetic)}
        start = time.perf_counter()
        listing = real + synthetic
        del real, synthetic
        targets = tgtadm.parse_targets(listing)
        self.times['parse'] = time.perf_counter() - start
        return targets


def backend_resolver(conf, driver):
    """The CLI's volume host -> backend function (as the code has it)."""
    from cinder_forcedetach.audit import sources
    from cinder_forcedetach.cmd import audit as audit_cmd
    from cinder_forcedetach.cmd import local

    if hasattr(sources, 'backend_resolver'):
        # Older commits kept the cluster option in the audit command.
        cluster_of = getattr(local, 'cluster_of', None) or getattr(
            audit_cmd, '_cluster')
        return sources.backend_resolver(cluster_of(conf), [BACKEND])
    return audit_cmd._backend_of(conf, {BACKEND: driver})


def measure(workdir):
    """Run the audit's pass on *workdir*'s sources; write result.json."""
    started = time.perf_counter()
    with open(os.path.join(workdir, 'params.json')) as f:
        params = json.load(f)

    import logging as std_logging
    std_logging.basicConfig(
        filename=os.path.join(workdir, 'audit.log'), level=std_logging.INFO)

    from cinder import context
    import cinder.privsep
    from cinder.volume import configuration as cinder_configuration
    from cinder.volume import driver as cinder_driver
    from oslo_config import cfg
    from oslo_utils import timeutils

    from cinder_forcedetach.audit import cases
    from cinder_forcedetach.audit import scan
    from cinder_forcedetach.audit import sources
    from cinder_forcedetach.drivers import iscsi
    from cinder_forcedetach.targets import cinder_tgt

    conf = cfg.CONF
    conf([], project='cinder', default_config_files=[])
    conf.set_override('connection', 'sqlite:///' + params['db'], 'database')
    conf.set_override('volume_name_template', NAME_TEMPLATE)
    conf.set_override('state_path', workdir)
    cinder.privsep.sys_admin_pctxt.set_client_mode(False)
    configuration = cinder_configuration.Configuration(
        cinder_driver.volume_opts, config_group=BACKEND_GROUP)
    driver = iscsi.TgtISCSIDriver(configuration=configuration,
                                  host=BACKEND)
    target = ListingTarget(params['control_port'], params['synthetic'])
    driver.exports = cinder_tgt.VolumeExports(configuration, target)
    ctxt = context.get_admin_context()
    imports = time.perf_counter() - started
    rss_imports = rss_mb()

    phases = collections.OrderedDict()
    marks = {}
    # As scan.run does: no cycle collection during the pass.
    no_gc = scan.no_cycle_collection()
    no_gc.__enter__()
    start = time.perf_counter()
    cinder = sources.CinderDB(ctxt, conf.volume_name_template,
                              backend_resolver(conf, driver))
    volumes, attachments = cinder.read()
    phases['cinder read'] = time.perf_counter() - start
    marks['cinder read'] = (_status_mb('VmRSS'), rss_mb())

    start = time.perf_counter()
    backend = sources.read_backend(BACKEND, driver)
    phases['backend read+parse'] = time.perf_counter() - start
    marks['backend read+parse'] = (_status_mb('VmRSS'), rss_mb())
    if backend.error:
        raise RuntimeError('backend: %s' % backend.error)
    start = time.perf_counter()
    sources.attach_holders(backend, cinder, volumes)
    phases['match holders'] = time.perf_counter() - start
    marks['match holders'] = (_status_mb('VmRSS'), rss_mb())

    start = time.perf_counter()
    nova = sources.read_nova_file(params['nova'])
    phases['nova read'] = time.perf_counter() - start
    marks['nova read'] = (_status_mb('VmRSS'), rss_mb())

    start = time.perf_counter()
    snapshot = cases.Snapshot(volumes, attachments, {BACKEND: backend},
                              nova, now=timeutils.utcnow())
    findings, skipped = cases.classify(snapshot, grace=GRACE)
    phases['classify'] = time.perf_counter() - start
    marks['classify'] = (_status_mb('VmRSS'), rss_mb())
    peak = rss_mb()
    no_gc.__exit__(None, None, None)

    live_volumes = sum(1 for v in volumes.values() if not v.deleted)
    live_attachments = sum(len(a) for a in attachments.values())
    with open(params['expected']) as f:
        expected = collections.Counter(tuple(e) for e in json.load(f))
    got = collections.Counter((f.case, f.volume_id, f.attachment_id)
                              for f in findings)
    missed = expected - got
    extra = got - expected
    samples = [f for f in findings
               if (f.case, f.volume_id, f.attachment_id) in extra][:5]
    result = {
        'phases': phases, 'imports': imports, 'rss_imports': rss_imports,
        'rss_peak': peak, 'rss_marks': marks, 'volumes': live_volumes,
        'attachments': live_attachments, 'backend': target.times,
        'listing': target.sizes, 'targets': len(backend.holders),
        'skipped': dict(skipped), 'findings': len(findings),
        'found': dict(collections.Counter(
            k[0] for k in (got & expected).elements())),
        'seeded': dict(collections.Counter(k[0] for k in expected)),
        'missed': dict(collections.Counter(k[0] for k in missed.elements())),
        'false_positives': dict(collections.Counter(
            k[0] for k in extra.elements())),
        'false_positive_samples': [
            {'case': f.case, 'volume': f.volume_id,
             'attachment': f.attachment_id, 'evidence': f.evidence,
             'action': f.action, 'refused': f.refused} for f in samples],
        'missed_samples': [list(k) for k in list(missed)[:5]],
        'refused': sum(1 for f in findings if f.refused),
        'cases': list(cases.CASES)}
    result['reconciler'] = reconciler_pass(driver)
    with open(os.path.join(workdir, 'result.json'), 'w') as f:
        json.dump(result, f)


def reconciler_pass(driver):
    """One pass of the volume service's reconciler over the same sources.

    What an idle volume service spends every interval: the audit's read
    and classify of its backend (no Nova), then the selection of the
    leaks to cut (one volume and one attachment read per leak of an
    available volume).  Nothing is cut (limit 0: the seeded leaks stay
    for the audit's own comparison).
    """
    from cinder_forcedetach import reconciler

    rec = reconciler.Reconciler(driver)
    rec.limit = 0
    start = time.perf_counter()
    cpu = time.process_time()
    last = rec.run_once()
    return {'seconds': time.perf_counter() - start,
            'cpu': time.process_time() - cpu,
            'findings': sum(last.get('findings', {}).values()),
            'selected': last.get('failed', 0) + last.get('cut', 0),
            'waiting': last.get('waiting', 0), 'cut': last.get('cut', 0),
            'interval': rec.interval,
            'unreachable': last.get('unreachable', [])}


# -- the driver of the run ----------------------------------------------------

def prepare(size, root, type_id, template_db, real, real_targets, tgtd):
    """The sources of one size, in their own directory."""
    workdir = os.path.join(root, 'size-%d' % size)
    os.makedirs(workdir)
    times = {}
    start = time.perf_counter()
    fleet = Fleet(size, type_id, datetime.datetime.utcnow())
    times['generate'] = time.perf_counter() - start
    if fleet.targets[:len(real_targets)] != real_targets:
        raise RuntimeError('the first targets differ between sizes')
    start = time.perf_counter()
    db = os.path.join(workdir, 'cinder.sqlite')
    shutil.copyfile(template_db, db)
    fill(db, fleet)
    times['insert'] = time.perf_counter() - start
    start = time.perf_counter()
    synthetic = os.path.join(workdir, 'synthetic-listing.txt')
    with open(synthetic, 'w') as f:
        for tid, target in enumerate(fleet.targets[real:], start=real + 1):
            f.write(render(tid, target))
    nova = os.path.join(workdir, 'nova.json')
    with open(nova, 'w') as f:
        json.dump(fleet.nova(), f)
    expected = os.path.join(workdir, 'expected.json')
    with open(expected, 'w') as f:
        json.dump(fleet.expected, f)
    times['files'] = time.perf_counter() - start
    params = {'db': db, 'synthetic': synthetic, 'nova': nova,
              'expected': expected,
              'control_port': tgtd.daemon.control_port if tgtd else None}
    with open(os.path.join(workdir, 'params.json'), 'w') as f:
        json.dump(params, f)
    info = {'times': times, 'rows': {
        'volumes': len(fleet.volumes), 'attachments': len(fleet.attachments),
        'admin metadata': len(fleet.metadata)},
        'targets': len(fleet.targets), 'real targets': real,
        'bdms': len(fleet.bdms), 'instances': len(fleet.instances),
        'seeds in real targets': sum(
            1 for t in real_targets if t.name in fleet.seeded_targets)}
    del fleet
    return workdir, info


def run_child(workdir):
    res = subprocess.run(
        [sys.executable, os.path.abspath(__file__), '--measure', workdir],
        capture_output=True, text=True, timeout=CHILD_TIMEOUT,
        env=dict(os.environ, PYTHONPATH=REPO, PYTHONWARNINGS='ignore'))
    path = os.path.join(workdir, 'result.json')
    if res.returncode or not os.path.exists(path):
        raise RuntimeError('measuring process failed (exit %d): %s' % (
            res.returncode, (res.stdout + res.stderr)[-3000:]))
    with open(path) as f:
        return json.load(f)


def warnings_logged(workdir):
    path = os.path.join(workdir, 'audit.log')
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for line in f if line.startswith('WARNING'))


PHASES = ('cinder read', 'backend read+parse', 'match holders', 'nova read',
          'classify')


def report(sizes, results, infos, setup):
    print('\nRead + classify pass (seconds per phase; one fresh process per '
          'size):')
    head = ('%8s %8s %8s  ' % ('attach', 'volumes', 'targets') +
            '  '.join('%9s' % p.split()[0] for p in PHASES) +
            '  %7s  %8s  %8s  %8s' % ('total', 'peak MB', 'base MB',
                                      'findings'))
    print(head)
    for n in sizes:
        r = results[n]
        total = sum(r['phases'].values())
        print('%8d %8d %8d  ' % (r['attachments'], r['volumes'],
                                 r['targets']) +
              '  '.join('%9.3f' % r['phases'][p] for p in PHASES) +
              '  %7.3f  %8.1f  %8.1f  %8d' % (total, r['rss_peak'],
                                              r['rss_imports'],
                                              r['findings']))
    print('(cinder = CinderDB.read; backend = read_backend: real tgtadm '
          'show + synthetic listing + parse_targets + holders; match = '
          'attach_holders incl. the deleted-volume query; nova = '
          'read_nova_file; classify = Snapshot + classify; base MB = RSS '
          'after imports)')

    print('\nBackend phase in detail:')
    for n in sizes:
        r = results[n]
        b, ls = r['backend'], r['listing']
        print('  %6d: tgtadm show (real, %d targets, %.1f MB) %.3f s; '
              'synthetic listing (%d targets, %.1f MB) read %.3f s; '
              'parse_targets of both %.3f s' % (
                  n, infos[n]['real targets'], ls['real'] / 1e6,
                  b['tgtadm show'], infos[n]['targets'] -
                  infos[n]['real targets'], ls['synthetic'] / 1e6,
                  b['synthetic read'], b['parse']))

    print('\nMemory after each phase (RSS now / peak so far, MB):')
    for n in sizes:
        marks = results[n]['rss_marks']
        print('  %6d: ' % n + ';  '.join(
            '%s %.0f/%.0f' % ((p,) + tuple(marks[p])) for p in PHASES))

    print('\nSeeded cases: found/seeded (missed, false positives):')
    print('%-28s' % 'case' + ''.join('%26s' % ('N=%d' % n) for n in sizes))
    known = results[sizes[0]]['cases']
    unseeded = [c for c in known if c not in SEEDED_CASES]
    for case in SEEDED_CASES + tuple(unseeded):
        cells = []
        for n in sizes:
            r = results[n]
            if case in unseeded:
                fp = r['false_positives'].get(case, 0)
                cells.append('not seeded (fp %d)' % fp)
                continue
            cells.append('%d/%d (%d, %d)' % (
                r['found'].get(case, 0), r['seeded'].get(case, 0),
                r['missed'].get(case, 0),
                r['false_positives'].get(case, 0)))
        print('%-28s' % case + ''.join('%26s' % c for c in cells))
    for case in unseeded:
        print('  %s: not seeded: %s' % (case, NOT_SEEDED.get(
            case, 'a case this script does not know')))
    for case in SEEDED_CASES:
        if case not in known:
            print('  %s: seeded, but the audit has no such case' % case)
    for n in sizes:
        r = results[n]
        fps = sum(r['false_positives'].values())
        print('  N=%d: %d findings, %d seeded, %d found, %d missed, %d '
              'false positives; %d refused for --fix; not audited: %s; '
              'warnings logged: %d' % (
                  n, r['findings'], sum(r['seeded'].values()),
                  sum(r['found'].values()), sum(r['missed'].values()), fps,
                  r['refused'], r['skipped'] or 'none', r['warnings']))
        for s in r['false_positive_samples']:
            print('    false positive: %s' % json.dumps(s, sort_keys=True))
        for s in r['missed_samples']:
            print('    missed: %s' % json.dumps(s))

    print('\nReconciler pass (the volume service\'s, every interval; '
          'nothing cut):')
    for n in sizes:
        rec = results[n].get('reconciler')
        if rec:
            print('  N=%d: %.3f s wall, %.3f s CPU per pass = %.1f %% of '
                  'its %d s interval; %d findings, %d leaks to cut, %d '
                  'inside the grace%s' % (
                      n, rec['seconds'], rec['cpu'],
                      100.0 * rec['seconds'] / (rec['interval'] or 60),
                      rec['interval'] or 60, rec['findings'],
                      rec['selected'], rec['waiting'],
                      '; unreachable: %s' % rec['unreachable']
                      if rec['unreachable'] else ''))
    print('\nLinearity (seconds per 1k attachments):')
    per_k = {n: sum(results[n]['phases'].values()) * 1000.0 / n
             for n in sizes}
    print('  ' + ';  '.join('N=%d: %.4f s' % (n, per_k[n]) for n in sizes))
    if len(sizes) > 1:
        lo, hi = min(sizes), max(sizes)
        print('  per-attachment cost at N=%d / at N=%d = %.2f (1.00 = '
              'linear)' % (hi, lo, per_k[hi] / per_k[lo]))
        for p in PHASES:
            a = results[lo]['phases'][p] / lo
            b = results[hi]['phases'][p] / hi
            print('    %-20s %.2f' % (p, b / a if a else float('nan')))

    print('\nSetup (not measured by the audit): %s' % '; '.join(
        '%s %.1f s' % kv for kv in setup.items()))
    for n in sizes:
        i = infos[n]
        print('  N=%d: generate %.1f s, insert %.1f s (%s), files %.1f s; '
              '%d targets (%d real), %d bdms, %d instances' % (
                  n, i['times']['generate'], i['times']['insert'],
                  ', '.join('%d %s rows' % (v, k)
                            for k, v in i['rows'].items()),
                  i['times']['files'], i['targets'], i['real targets'],
                  i['bdms'], i['instances']))

    goal = GOAL_SIZE if GOAL_SIZE in results else max(sizes)
    r = results[goal]
    total = sum(r['phases'].values())
    seeded = sum(r['seeded'].values())
    found = sum(r['found'].values())
    fps = sum(r['false_positives'].values())
    checks = [('total < %.0f s' % GOAL_SECONDS, total < GOAL_SECONDS,
               '%.3f s' % total),
              ('peak RSS < %.0f MB' % GOAL_RSS_MB, r['rss_peak'] < GOAL_RSS_MB,
               '%.1f MB' % r['rss_peak']),
              ('100% of seeds found', found == seeded,
               '%d/%d' % (found, seeded)),
              ('0 false positives', fps == 0, '%d' % fps)]
    print('\nGoals at N=%d%s: %s' % (
        goal, '' if goal == GOAL_SIZE else ' (the largest size run; the '
        'goals are for N=%d)' % GOAL_SIZE,
        '; '.join('%s: %s (%s)' % (name, 'met' if ok else 'NOT met', value)
                  for name, ok, value in checks)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sizes', default='10000,50000,100000',
                        help='comma-separated numbers of live attachments, '
                             'multiples of 100; volumes = half of it '
                             '(default 10000,50000,100000)')
    parser.add_argument('--real-targets', type=int, default=2000,
                        help='targets on the real tgtd (the first ones of '
                             'the listing); the rest is synthetic; 0: no '
                             'tgtd (default 2000)')
    parser.add_argument('--keep', action='store_true',
                        help='keep the work directory (databases, '
                             'listings, Nova files, logs) and print it')
    parser.add_argument('--measure', metavar='DIR', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        return measure(args.measure)
    sizes = sorted({int(n) for n in args.sizes.split(',')})
    if any(n <= 0 or n % BLOCK_ATTACHMENTS for n in sizes):
        parser.error('sizes must be positive multiples of %d' %
                     BLOCK_ATTACHMENTS)

    import warnings
    warnings.simplefilter('ignore')
    root = tempfile.mkdtemp(prefix='fd-bench-audit-')
    tgtd = None
    setup = collections.OrderedDict()
    try:
        start = time.perf_counter()
        template_db = os.path.join(root, 'schema.sqlite')
        type_id = make_schema(template_db)
        setup['Cinder schema (db_sync)'] = time.perf_counter() - start
        # The first targets are the same at every size.
        first = Fleet(min(sizes), type_id, datetime.datetime.utcnow())
        real = min(args.real_targets, len(first.targets))
        real_targets = first.targets[:real]
        del first
        format_diff = None
        if real:
            tgtd = RealTgtd(root)
            start = time.perf_counter()
            tgtd.start()
            setup['tgtd start'] = time.perf_counter() - start
            start = time.perf_counter()
            tgtd.create_all(real_targets)
            setup['%d real targets (tgtadm)' % real] = \
                time.perf_counter() - start
            format_diff = check_format(tgtd.listing(), real_targets,
                                       tgtd.backing)
        print('Audit read + classify at scale; code %s; %d cores; load %s; '
              'sizes %s' % (code_version(), os.cpu_count(), load(),
                            ', '.join(map(str, sizes))))
        print('Sources: Cinder DB = REAL Cinder 29 schema (db_sync) in '
              'SQLite, GENERATED rows; backend = REAL tgtd (%s) with %d '
              'targets '
              '(LUN 1 on one shared sparse file, ACLs; no sessions nor CHAP '
              'accounts) + SYNTHETIC tgtadm listing for the other targets '
              '(with sessions and accounts), parsed together by our '
              'parser; Nova = GENERATED JSON via read_nova_file.' % (
                  tgtd_version() if real else 'not started', real))
        if real:
            print('Synthetic format vs the real listing of the same %d '
                  'targets: %s' % (real, format_diff or 'identical lines'))
        results, infos = {}, {}
        for n in sizes:
            workdir, infos[n] = prepare(n, root, type_id, template_db, real,
                                        real_targets, tgtd)
            results[n] = run_child(workdir)
            results[n]['warnings'] = warnings_logged(workdir)
            r = results[n]
            print('  N=%d done: total %.3f s, peak %.1f MB, %d findings' % (
                n, sum(r['phases'].values()), r['rss_peak'], r['findings']),
                flush=True)
        report(sizes, results, infos, setup)
        print('load %s at end' % load())
        wrong = ['N=%d: %s' % (n, what) for n in sizes
                 for what, count in (
                     ('missed seeds', sum(results[n]['missed'].values())),
                     ('false positives',
                      sum(results[n]['false_positives'].values())),
                     ('reconciler sources unreachable',
                      len(results[n]['reconciler']['unreachable'])))
                 if count]
        for what in wrong:
            print('CHECK FAILED: %s' % what, file=sys.stderr)
        return 1 if wrong else 0
    finally:
        if tgtd is not None:
            tgtd.stop()
        if args.keep:
            print('work directory kept: %s' % root)
        else:
            shutil.rmtree(root, ignore_errors=True)


def load():
    with open('/proc/loadavg') as f:
        return ' '.join(f.read().split()[:3])


def code_version():
    def git(*args):
        return subprocess.run(('git', '-C', REPO) + args, capture_output=True,
                              text=True).stdout.strip()
    head = git('rev-parse', '--short', 'HEAD') or 'unknown'
    dirty = git('status', '--porcelain', '--', 'cinder_forcedetach/audit',
                'cinder_forcedetach/targets')
    return '%s%s' % (head, ' + uncommitted changes in audit/targets' if dirty
                     else '')


def tgtd_version():
    out = subprocess.run(['tgtadm', '--version'], capture_output=True,
                         text=True).stdout.strip()
    return 'tgt %s' % out if out else 'tgt'


if __name__ == '__main__':
    sys.exit(main())
