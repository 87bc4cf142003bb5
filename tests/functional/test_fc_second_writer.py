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

"""No second writer on FC, whoever reset the state (fence on grant).

The operator path of :mod:`tests.functional.test_iscsi_second_writer`, on
the FC driver (``cinder_forcedetach.drivers.fc.FibreChannelDriver``):
host A attached through Cinder's real API and writing, then
``os-reset_status`` (``cinder reset-state --state available
--attach-status detached``, or the status alone as Horizon's "Update
Volume Status" sends it), then host B attaches.  Proven here:

* before B's LUN is mapped, A's LUN map is gone from the array and, when
  A has no other LUN there, the zones of A's initiators are gone from the
  switch (the array's ``map_volume`` for B is watched: at that moment the
  masking and zoning are read; the switch's event log shows A's zone
  removal before B's zone creation);
* A's device loses its path: A's write after B's grant fails (ENXIO) and
  its bytes are not in the volume file; a rescan on A finds no LUN;
* B is mapped and zoned, its device appears, its write lands in the file;
* the cut is recorded in the volume's admin metadata;
* with a status-only reset (A's attachment, instance X, stays
  ``attached``; B's is instance Y), A is cut all the same; A's zones stay
  because another LUN of A's is still mapped, and that LUN keeps working;
* no false cut: on a multiattach volume a live attachment explains its
  host, so A stays mapped, zoned and writing when B attaches (while a
  host a reset left behind on the same volume is cut at the grant
  before).

Real, as in :mod:`tests.functional.test_fc`: Cinder's API, scheduler and
volume services in-process (Cinder's functional harness) loading
``FibreChannelDriver``; their SQLite database and tooz file locks;
Cinder's ZoneManager and FCSanLookupService; the SQLite reference array
(LUN masking); os-brick's ``FibreChannelConnector`` with a forked privsep
daemon; loop devices on the sparse volume files, written through.

Emulated, because this machine has no FC HBA, no FC switch and no SCSI
subsystem (:mod:`tests.support.fc_fabric`): the switch behind the zone
manager (zones are rows of a SQLite file), each host's HBAs as its
``/sys`` and ``/dev`` in a private mount namespace, ``/lib/udev/scsi_id``,
and the kernel (a separate process) that answers os-brick's ``scan`` and
``delete`` writes.  A host's "path" to the LUN is a block node of a loop
device on the volume file; it exists only while the array masks the LUN
to the host's WWPN *and* the switch zones that WWPN with the target port.
When either goes, the emulated kernel detaches the loop device and points
the node at an unregistered block major: the host's I/O fails with ENXIO,
as on an offline SCSI disk.

Failed on main at 4917ab2, before fence on grant (run on an export of
that commit, with ``grant_fence.py`` present only so that ``RECORD_KEY``
imports; nothing there calls it): B's LUN map was made while A's was
still there, the host reset away was never unmapped, and A's write after
B's grant landed in the volume file next to B's.  Every test here also
fails with ``return []`` as the first line of
:func:`cinder_forcedetach.grant_fence.fence_before_grant`.  Passes with
:mod:`cinder_forcedetach.grant_fence`.
"""

import json
import os
from unittest import mock

from cinder.db import api as db

from cinder_forcedetach import grant_fence
from tests.functional import test_fc
from tests.support import fc_fabric

BLOCK = 4096
INSTANCE_X = '11111111-1111-4111-8111-111111111111'
INSTANCE_Y = '22222222-2222-4222-8222-222222222222'


class FCSecondWriterTestCase(test_fc.CinderFCTestCase):

    # -- helpers ------------------------------------------------------------

    def host(self, name):
        return (self.fabric.hosts.get(name) or
                self.fabric.add_host(name, n_hbas=2))

    def attached_as(self, host_name, volume_id, instance=None):
        """Attach as Nova does (instance *instance*); connect and write.

        Returns ``(attachment, connection_info, host, device)``.
        """
        host = self.host(host_name)
        att, info = self.attach(volume_id, host, instance=instance)
        self.assertEqual('fibre_channel', info['driver_volume_type'])
        device = host.connect(info)
        self.assertEqual({'ok': True},
                         host.write(device['path'], b'\x5a' * BLOCK))
        return att, info, host, device

    def volume_block(self, volume_id, offset):
        with open(os.path.join(self.volumes_dir,
                               'volume-%s' % volume_id), 'rb') as f:
            f.seek(offset)
            return f.read(BLOCK)

    def assert_writes(self, host, device, volume_id, byte, offset):
        """*host* writes through its device and the bytes land."""
        self.assertEqual({'ok': True},
                         host.write(device['path'], byte * BLOCK, offset))
        self.assertEqual(byte * BLOCK, self.volume_block(volume_id, offset))

    def watch_grants(self):
        """What the array and switch showed when each LUN map was made.

        Wraps the driver's ``array.map_volume`` (what the volume service's
        ``initialize_connection`` calls, under the masking lock): each
        call records the hosts the volume was mapped to and the zoned
        initiators just before the new map.
        """
        seen = []
        real = self.array.map_volume

        def map_volume(volume_name, host):
            seen.append({'host': host,
                         'mapped': sorted(self.array.hosts_of_volume(
                             volume_name)),
                         'zoned': self.switch.zoned_initiators()})
            return real(volume_name, host)
        patcher = mock.patch.object(self.array, 'map_volume', map_volume)
        patcher.start()
        self.addCleanup(patcher.stop)
        return seen

    def watch_holders(self):
        """The holders the grant fence read, per grant (a spy)."""
        seen = []
        real = self.driver.volume_holders

        def volume_holders(volume):
            holders = real(volume)
            seen.append(sorted(h.label for h in holders or []))
            return holders
        patcher = mock.patch.object(self.driver, 'volume_holders',
                                    volume_holders)
        patcher.start()
        self.addCleanup(patcher.stop)
        return seen

    def switch_ops(self, since, hosts):
        """(op, host) of the zone changes since *since* for *hosts*.

        A zone change belongs to the host whose WWPN is its initiator;
        repeats in a row (the zone manager makes one call per initiator)
        are shown once.
        """
        owner = {w: h.name for h in hosts for w in h.wwpns}
        ops = []
        for event in self.switch.events(source='switch', since=since):
            names = sorted({owner[i] for i, _t in event['pairs']
                            if i in owner})
            for name in names:
                if not ops or ops[-1] != (event['op'], name):
                    ops.append((event['op'], name))
        return ops

    def assert_cut(self, host, device, info, volume_id, offset):
        """*host* lost its path: its write fails and does not land.

        A rescan on the host (os-brick's connect_volume) finds no LUN.
        """
        self.fabric.wait_for(
            lambda: [d for d in self.switch.devices(host.name)
                     if d['state'] == 'offline' and
                     d['volume'] == 'volume-%s' % volume_id],
            'the path of %s to volume %s to go' % (host.name, volume_id))
        result = host.write(device['path'], b'\xa7' * BLOCK, offset)
        self.assertFalse(result['ok'], result)
        self.assertEqual('ENXIO', result['errno'])
        self.assertNotIn(b'\xa7', self.volume_block(volume_id, offset))
        err = self.assertRaises(fc_fabric.HostError, host.connect, info)
        self.assertEqual('NoFibreChannelVolumeDeviceFound', err.type)

    def fence_record(self, volume_id):
        meta = db.volume_admin_metadata_get(self.ctxt, volume_id)
        return json.loads(meta[grant_fence.RECORD_KEY])

    # -- the cases -----------------------------------------------------------

    def test_reset_state_then_attach_elsewhere_unmaps_the_first_host(self):
        vol = self.create_volume()['id']
        _att_a, info_a, host_a, dev_a = self.attached_as('compute1', vol)
        self.reset_status(vol, status='available', attach_status='detached')
        # Control: the reset changed nothing on the fabric; A still writes.
        self.assert_writes(host_a, dev_a, vol, b'\x11', 16 * BLOCK)
        self.assertEqual(['compute1'], self.hosts_of(vol))
        host_b = self.host('compute2')
        grants = self.watch_grants()
        mark = self.switch.last_event_id()

        _att_b, info_b, host_b, dev_b = self.attached_as('compute2', vol)

        # When B's LUN map was made, A's map and zones were already gone.
        self.assertEqual([{'host': 'compute2', 'mapped': [],
                           'zoned': set()}], grants)
        self.assertEqual([('delete_connection', 'compute1'),
                          ('add_connection', 'compute2')],
                         self.switch_ops(mark, [host_a, host_b]))
        self.assertEqual(['compute2'], self.hosts_of(vol))
        self.assertEqual(set(), self.zoned(host_a))
        self.assert_zoned(host_b)
        self.assert_cut(host_a, dev_a, info_a, vol, 17 * BLOCK)
        self.assert_writes(host_b, dev_b, vol, b'\x22', 18 * BLOCK)
        # B reads what A wrote before it was cut: one volume, one writer.
        self.assertEqual(b'\x11' * BLOCK, host_b.read(
            dev_b['path'], BLOCK, 16 * BLOCK)['data'])
        record = self.fence_record(vol)
        self.assertEqual('compute2', record['granted_to'])
        self.assertEqual(['mapping compute1'], record['cut'])

    def test_status_only_reset_then_attach_elsewhere(self):
        """Horizon's "Update Volume Status": A's attachment stays live.

        A (instance X) also has another volume mapped: A is unmapped from
        the reset volume, keeps its zones and its other LUN.
        """
        vol = self.create_volume()['id']
        other = self.create_volume()['id']
        att_a, info_a, host_a, dev_a = self.attached_as(
            'compute1', vol, instance=INSTANCE_X)
        _att, _info, _host, dev_other = self.attached_as(
            'compute1', other, instance=INSTANCE_X)
        self.reset_status(vol, status='available')
        self.assertEqual('attached', db.volume_attachment_get(
            self.ctxt, att_a['id']).attach_status)
        self.assert_writes(host_a, dev_a, vol, b'\x11', 16 * BLOCK)
        grants = self.watch_grants()

        _att_b, _info_b, host_b, dev_b = self.attached_as(
            'compute2', vol, instance=INSTANCE_Y)

        self.assertEqual([{'host': 'compute2', 'mapped': [],
                           'zoned': set(host_a.wwpns)}], grants)
        self.assertEqual(['compute2'], self.hosts_of(vol))
        self.assertEqual(['compute1'], self.hosts_of(other))
        self.assert_zoned(host_a)
        self.assert_cut(host_a, dev_a, info_a, vol, 17 * BLOCK)
        self.assert_writes(host_b, dev_b, vol, b'\x22', 18 * BLOCK)
        self.assert_writes(host_a, dev_other, other, b'\x33', 16 * BLOCK)
        self.assertEqual(['mapping compute1'], self.fence_record(vol)['cut'])

    def test_multiattach_second_host_keeps_the_first(self):
        """No false cut: a live attachment explains its host.

        The fence runs at B's grant (it reads A's mapping) and keeps A; on
        the same volume, the host a reset left (compute3) was cut at A's
        grant, so keeping A is the fence's decision, not its absence.
        """
        vol = self.create_volume(
            volume_type=self.multiattach_type())['id']
        _att, info_s, host_s, dev_s = self.attached_as('compute3', vol)
        self.reset_status(vol, status='available', attach_status='detached')
        _att_a, _info_a, host_a, dev_a = self.attached_as('compute1', vol)
        self.assert_cut(host_s, dev_s, info_s, vol, 15 * BLOCK)
        self.assertEqual('compute1', self.fence_record(vol)['granted_to'])
        holders = self.watch_holders()
        grants = self.watch_grants()

        _att_b, _info_b, host_b, dev_b = self.attached_as('compute2', vol)

        self.assertEqual([['compute1']], holders)
        self.assertEqual([{'host': 'compute2', 'mapped': ['compute1'],
                           'zoned': set(host_a.wwpns)}], grants)
        self.assertEqual(['compute1', 'compute2'], self.hosts_of(vol))
        self.assert_zoned(host_a)
        self.assert_zoned(host_b)
        self.assertEqual(
            [], [d for d in self.switch.devices('compute1')
                 if d['state'] != 'running'])
        self.assert_writes(host_a, dev_a, vol, b'\x11', 16 * BLOCK)
        self.assert_writes(host_b, dev_b, vol, b'\x22', 17 * BLOCK)
        # The record is still A's grant's: B's cut nothing.
        self.assertEqual('compute1', self.fence_record(vol)['granted_to'])
