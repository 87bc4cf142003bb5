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

"""Force-detach of the FC driver on an emulated fabric, in real Cinder.

Real: Cinder's API, scheduler and volume services (its in-process
harness) loading ``FibreChannelDriver``, their SQLite database and tooz file
locks; Cinder's ZoneManager and FCSanLookupService; the SQLite reference
array (LUN masking); os-brick's ``FibreChannelConnector`` with a forked
privsep daemon that really runs ``tee``, ``dd``, ``blockdev`` and
``scsi_id``; loop devices on the volume files, written through.

Emulated, because this machine has no FC HBA, no FC switch and no SCSI
subsystem in its kernel (:mod:`tests.support.fc_fabric` says how): the
switch behind the zone manager, each host's ``/sys`` and ``/dev`` (a
private mount namespace), ``/lib/udev/scsi_id``, and the kernel's answer to
the ``scan`` and ``delete`` writes os-brick makes.  A host's device
appears only when the array masks the LUN to it *and* the switch zones it;
it loses its path (I/O fails with ENXIO) when either goes away.

"This host" is the host whose name is this machine's hostname: its
force-detach runs the driver in a fresh process inside that host's
namespace, configured as the test's volume service (same Cinder database
file, tooz backend, array and zone manager), so the flow's os-brick
disconnect acts on that host's devices.
"""

import os
import socket

from cinder import exception as cinder_exception
from cinder.tests.functional.api import client
from cinder.volume import configuration
from cinder.volume import volume_utils
import ddt
import fixtures
from oslo_config import cfg

# Imported before flags are set, so that its options are registered.
from cinder_forcedetach.audit import scan
from cinder_forcedetach.audit import sources
from cinder_forcedetach.drivers import fc  # noqa: F401
from cinder_forcedetach import exception
from cinder_forcedetach.flows import force_detach as flow
from tests import fakes
from tests.functional import base
from tests.support import fc_fabric

CONF = cfg.CONF
DRIVER = 'cinder_forcedetach.drivers.fc.FibreChannelDriver'
BACKEND = configuration.SHARED_CONF_GROUP
TARGETS = ['5001438012345678', '5001438012345679']
ARRAY_TIMEOUT = 1.0
THIS_HOST = socket.gethostname()
DATA = b'written through the emulated FC path\n' * 111


class CinderFCTestCase(base.CinderServicesTestCase):
    """Cinder API + scheduler + volume services on the emulated fabric."""

    _vol_type_name = 'forcedetach-fc'

    def setUp(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        self.volumes_dir = os.path.join(tmp, 'volumes')
        self.array_db = os.path.join(tmp, 'array.sqlite')
        self.fabric = self.useFixture(fc_fabric.EmulatedFabric(
            self.array_db, self.volumes_dir, TARGETS))
        super(CinderFCTestCase, self).setUp()
        self.array = self.driver.array
        self.switch = self.fabric.state
        self.connectors = {}

    def _get_flags(self):
        f = super(CinderFCTestCase, self)._get_flags()
        f['volume_driver'] = {'v': DRIVER, 'g': BACKEND}
        f['forcedetach_volumes_dir'] = {'v': self.volumes_dir, 'g': BACKEND}
        f['forcedetach_fc_array_db'] = {'v': self.array_db, 'g': BACKEND}
        f['forcedetach_fc_target_wwpns'] = {'v': TARGETS, 'g': BACKEND}
        f['forcedetach_fc_array_timeout'] = {'v': ARRAY_TIMEOUT,
                                             'g': BACKEND}
        f['forcedetach_device_scan_attempts'] = {'v': 2, 'g': BACKEND}
        f.update(fakes.zoning_flags(self.fabric.db))
        return f

    # -- Cinder ------------------------------------------------------------

    def connector(self, host):
        if host.name not in self.connectors:
            self.connectors[host.name] = host.connector()
        return self.connectors[host.name]

    # -- the fabric --------------------------------------------------------

    def attached(self, host_name='compute1', volume_id=None):
        """A volume attached in Cinder, connected by os-brick, written."""
        host = (self.fabric.hosts.get(host_name) or
                self.fabric.add_host(host_name, n_hbas=2))
        volume_id = volume_id or self.create_volume()['id']
        att, info = self.attach(volume_id, host)
        self.assertEqual('fibre_channel', info['driver_volume_type'])
        device = host.connect(info)
        self.assertEqual({'ok': True}, host.write(device['path'], DATA))
        with open(os.path.join(self.volumes_dir,
                               'volume-%s' % volume_id), 'rb') as f:
            self.assertEqual(DATA, f.read(len(DATA)))
        self.assertEqual('in-use', self.api.get_volume(volume_id)['status'])
        return volume_id, att, info, host, device

    def hosts_of(self, volume_id):
        return sorted(self.array.hosts_of_volume('volume-%s' % volume_id))

    def zoned(self, host):
        return set(host.wwpns) & self.switch.zoned_initiators()

    def assert_zoned(self, host):
        zones = self.switch.zones()
        self.assertEqual({(w, t) for w in host.wwpns for t in TARGETS},
                         {(w, t) for w, t in zones if w in host.wwpns})

    def assert_db_unchanged(self, volume_id, att):
        vol = self.db_volume(volume_id)
        self.assertEqual(('in-use', 'attached', [att['id']]),
                         (vol.status, vol.attach_status,
                          [a.id for a in vol.volume_attachment]))

    def assert_torn_down(self, volume_id, host):
        """Masking gone, the host's zones gone, Cinder reset."""
        self.assertEqual([], self.hosts_of(volume_id))
        self.assertEqual(set(), self.zoned(host))
        self.assert_detached(volume_id)

    def assert_path_lost(self, host, device):
        """The host's device lost its path: its I/O fails, no rescan."""
        self.fabric.wait_for(
            lambda: not [d for d in self.switch.devices(host.name)
                         if d['state'] == 'running'],
            'the paths of %s to go' % host.name)
        result = host.write(device['path'], b'late write')
        self.assertFalse(result['ok'], result)

    def service_config(self):
        """What a volume service on this host needs to share our state."""
        return {
            'DEFAULT': {'host': CONF.host, 'zoning_mode': 'fabric'},
            'database': {'connection': CONF.database.connection},
            'coordination': {'backend_url': CONF.coordination.backend_url},
            'oslo_concurrency': {'lock_path': CONF.oslo_concurrency.lock_path},
            fakes.ZM_GROUP: {
                'zone_driver': fakes.ZONE_DRIVER,
                'fc_san_lookup_service': fakes.LOOKUP_SERVICE,
                'emulated_fabric_db': self.fabric.db},
            BACKEND: {'forcedetach_volumes_dir': self.volumes_dir,
                      'forcedetach_fc_array_db': self.array_db,
                      'forcedetach_fc_target_wwpns': TARGETS,
                      'forcedetach_fc_array_timeout': ARRAY_TIMEOUT,
                      'forcedetach_device_scan_attempts': 2}}

    def force_detach_on_this_host(self, host, volume_id, crash_after=None,
                                  **kwargs):
        """driver.force_detach by a volume service that is *host*.

        A fresh process in *host*'s namespace (its /sys and /dev), with
        its own os-brick privsep daemon, on the test's Cinder database.
        """
        return host.force_detach(self.service_config(), volume_id,
                                 crash_after=crash_after, **kwargs)


@ddt.ddt
class FCForceDetachTestCase(CinderFCTestCase):

    # -- the core guarantee -------------------------------------------------

    def test_attach_zones_and_masks(self):
        vol_id, att, info, host, device = self.attached()
        self.assertEqual(['compute1'], self.hosts_of(vol_id))
        self.assert_zoned(host)
        data = info.get('data', info)
        self.assertEqual(TARGETS, data['target_wwn'])
        self.assertEqual({w: TARGETS for w in host.wwpns},
                         data['initiator_target_map'])
        # os-brick scanned through the privsep daemon; both paths appeared.
        self.assertIn('tee -a /sys/class/scsi_host/host5/scan',
                      host.commands(privileged=True))
        self.assertEqual(4, len(host.by_path()))  # 2 HBAs x 2 target ports

    def test_force_detach_remote_host(self):
        vol_id, att, _info, host, device = self.attached()
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        self.assert_torn_down(vol_id, host)
        self.assert_path_lost(host, device)
        # A rescan on the host brings nothing back: not masked, not zoned.
        err = self.assertRaises(fc_fabric.HostError, host.connect, _info)
        self.assertEqual('NoFibreChannelVolumeDeviceFound', err.type)
        # compute1 is not this host: the flow ran no os-brick teardown on it.
        self.assertEqual([], [c for c in host.commands() if '/delete' in c])

    def test_force_detach_this_host_disconnects_with_os_brick(self):
        vol_id, att, _info, host, device = self.attached(THIS_HOST)
        devices = {d['name'] for d in self.switch.devices(THIS_HOST)}
        self.force_detach_on_this_host(host, vol_id)
        self.assert_torn_down(vol_id, host)
        # os-brick's privileged teardown really ran, in the privsep daemon,
        # and the emulated kernel removed every path's device.
        ran = host.commands(privileged=True)
        for name in devices:
            self.assertIn('tee -a /sys/block/%s/device/delete' % name, ran)
        self.fabric.wait_for(
            lambda: {e['device'] for e in self.switch.events(
                op='device-deleted')} == devices, 'the devices to go')
        self.assertEqual([], host.by_path())
        with open(os.path.join(self.volumes_dir,
                               'volume-%s' % vol_id), 'rb') as f:
            self.assertEqual(DATA, f.read(len(DATA)))

    def test_force_detach_twice_is_a_success(self):
        vol_id, att, _info, host, device = self.attached(THIS_HOST)
        for kwargs in ({'attachment_id': att['id']},
                       {'attachment_id': att['id']}, {}):
            self.force_detach_on_this_host(host, vol_id, **kwargs)
            self.assert_torn_down(vol_id, host)
        self.assertEqual([], host.by_path())

    def test_each_backend_step_twice(self):
        vol_id, att, _info, host, device = self.attached()
        volume = self.db_volume(vol_id)
        connector = self.connector(host)
        for _ in range(2):
            self.assertFalse(self.driver.revoke_host_access(volume,
                                                            connector))
            self.driver.fence_clients(volume, [connector], [])
            self.driver.disconnect_local_host(volume, connector, [])
            self.driver.remove_export(self.ctxt, volume)
            self.assertEqual(([], set()),
                             (self.hosts_of(vol_id), self.zoned(host)))
        for _ in range(2):
            volume.finish_detach(att['id'])
        self.assert_torn_down(vol_id, host)
        self.assert_path_lost(host, device)

    # -- several hosts, several LUNs ------------------------------------------

    def test_force_detach_one_host_keeps_the_other(self):
        vol_id = self.create_volume(
            volume_type=self.multiattach_type())['id']
        _v, att_a, _i, host_a, dev_a = self.attached('compute1', vol_id)
        _v, att_b, _i, host_b, dev_b = self.attached('compute2', vol_id)
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id),
                                 connector=self.connector(host_a))
        self.assertEqual(['compute2'], self.hosts_of(vol_id))
        self.assertEqual(set(), self.zoned(host_a))
        self.assert_zoned(host_b)
        self.assert_path_lost(host_a, dev_a)
        self.assertEqual({'ok': True}, host_b.write(dev_b['path'], b'b'))
        volume = self.db_volume(vol_id)
        self.assertEqual(('in-use', [att_b['id']]),
                         (volume.status,
                          [a.id for a in volume.volume_attachment]))
        # Then the last host: everything goes.
        self.driver.force_detach(self.ctxt, volume)
        self.assert_torn_down(vol_id, host_b)

    def test_shared_initiator_keeps_its_zone(self):
        vol1, att1, _i, host, dev1 = self.attached()
        vol2, att2, _i, _h, dev2 = self.attached()
        self.driver.force_detach(self.ctxt, self.db_volume(vol1))
        self.assertEqual([], self.hosts_of(vol1))
        self.assert_zoned(host)  # vol2 still mapped to compute1
        self.assert_detached(vol1)
        self.assertEqual({'ok': True}, host.write(dev2['path'], b'still'))
        self.driver.force_detach(self.ctxt, self.db_volume(vol2))
        self.assert_torn_down(vol2, host)
        self.assert_path_lost(host, dev2)

    # -- crashes and failures -------------------------------------------------

    @ddt.data(flow.DisconnectLocalHostTask, flow.RevokeHostAccessTask,
              flow.FenceClientsTask, flow.RemoveExportTask)
    def test_crash_after_step_then_rerun(self, step):
        vol_id, att, _info, host, device = self.attached(THIS_HOST)
        err = self.assertRaises(fc_fabric.HostError,
                                self.force_detach_on_this_host, host, vol_id,
                                crash_after=step.__name__)
        self.assertEqual('ForceDetachFailed', err.type)
        self.assertIn(step.__name__, str(err))
        self.assert_db_unchanged(vol_id, att)
        self.force_detach_on_this_host(host, vol_id)
        self.assert_torn_down(vol_id, host)
        self.assertEqual([], host.by_path())

    def test_zone_removal_failure_then_rerun(self):
        vol_id, att, _info, host, device = self.attached()
        self.switch.inject_fault('delete_connection')
        err = self.assertRaises(exception.ForceDetachFailed,
                                self.driver.force_detach, self.ctxt,
                                self.db_volume(vol_id))
        self.assertIn('RevokeHostAccessTask', str(err))
        # Unmapped already, zones still there, Cinder untouched.
        self.assertEqual([], self.hosts_of(vol_id))
        self.assert_zoned(host)
        self.assert_db_unchanged(vol_id, att)
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        self.assert_torn_down(vol_id, host)

    def test_array_timeout_fails_naming_the_step(self):
        vol_id, att, _info, host, device = self.attached()
        with fakes.array_locked(self.array_db):
            err = self.assertRaises(exception.ForceDetachFailed,
                                    self.driver.force_detach, self.ctxt,
                                    self.db_volume(vol_id))
        self.assertIn('RevokeHostAccessTask', str(err))
        self.assertIn('timed out', str(err))
        self.assert_db_unchanged(vol_id, att)
        self.assertEqual(['compute1'], self.hosts_of(vol_id))
        self.assert_zoned(host)
        self.assertEqual({'ok': True}, host.write(device['path'], DATA))
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        self.assert_torn_down(vol_id, host)

    def test_busy_array_host_fails_and_changes_nothing(self):
        vol_id, att, _info, host, device = self.attached()
        self.array.set_host_busy('compute1', 'held by another session')
        err = self.assertRaises(exception.ForceDetachFailed,
                                self.driver.force_detach, self.ctxt,
                                self.db_volume(vol_id))
        self.assertIn('busy', str(err))
        self.assert_db_unchanged(vol_id, att)
        self.assertEqual(['compute1'], self.hosts_of(vol_id))
        self.assert_zoned(host)
        self.array.set_host_busy('compute1', None)
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id))
        self.assert_torn_down(vol_id, host)

    @ddt.data({'host': 'compute1'}, {'host': 'compute1', 'wwpns': []},
              {'host': 'compute1', 'wwpns': ['not-a-wwpn']},
              {'host': 'compute1', 'wwpns': '10000090fa000001'})
    def test_malformed_connector_changes_nothing(self, connector):
        vol_id, att, _info, host, device = self.attached()
        self.assertRaises(cinder_exception.InvalidConnectorException,
                          self.driver.force_detach, self.ctxt,
                          self.db_volume(vol_id), connector=connector)
        self.assert_db_unchanged(vol_id, att)
        self.assertEqual(['compute1'], self.hosts_of(vol_id))
        self.assert_zoned(host)
        self.driver.force_detach(self.ctxt, self.db_volume(vol_id),
                                 connector=self.connector(host))
        self.assert_torn_down(vol_id, host)

    # -- through Cinder's own API --------------------------------------------

    @ddt.data(True, False)
    def test_api_force_detach_round_trip(self, with_connector):
        vol_id, att, _info, host, device = self.attached()
        connector = self.connector(host) if with_connector else None
        self.force_detach_api(vol_id, connector, att['id'])
        self.assertEqual('available', self.api.get_volume(vol_id)['status'])
        self.assert_torn_down(vol_id, host)
        self.assert_path_lost(host, device)
        # The volume goes to another host and is readable there.
        other = self.fabric.add_host('compute2')
        _att2, info2 = self.attach(vol_id, other)
        device2 = other.connect(info2)
        result = other.read(device2['path'], len(DATA))
        self.assertEqual(DATA, result['data'])
        self.assertEqual(['compute2'], self.hosts_of(vol_id))
        self.assertEqual(set(), self.zoned(host))

    def test_api_force_detach_array_timeout_is_an_error(self):
        vol_id, att, _info, host, device = self.attached()
        with fakes.array_locked(self.array_db):
            self.assertRaises(client.OpenStackApiException,
                              self.force_detach_api, vol_id,
                              self.connector(host), att['id'])
        self.assert_db_unchanged(vol_id, att)
        self.assertEqual(['compute1'], self.hosts_of(vol_id))
        self.assert_zoned(host)
        self.force_detach_api(vol_id, self.connector(host), att['id'])
        self.assert_torn_down(vol_id, host)

    def test_api_attachment_delete(self):
        vol_id, att, _info, host, device = self.attached()
        self.api.api_delete('/attachments/%s' % att['id'])
        self.wait_volume(vol_id, ('available',))
        self.assert_torn_down(vol_id, host)


class FCAuditTestCase(CinderFCTestCase):
    """The audit pass on the FC driver's array and the emulated fabric.

    In this process, through :func:`cinder_forcedetach.audit.scan.run`:
    the command's path without its configuration loading (the command
    itself runs on tgt in :mod:`tests.functional.test_audit`).
    """

    def audit(self, **kwargs):
        backend = volume_utils.extract_host(self.volume.host, 'backend')
        report = scan.run(self.ctxt, {backend: self.driver},
                          CONF.volume_name_template,
                          sources.backend_resolver(None, [backend]),
                          **kwargs)
        self.assertEqual([], report.unreachable)
        return report.findings

    def test_mapping_left_by_reset_state_is_unmapped_and_unzoned(self):
        vol_id, _att, _info, host, _device = self.attached()
        self.api.api_post('/volumes/%s/action' % vol_id,
                          {'os-reset_status': {'status': 'available',
                                               'attach_status': 'detached'}},
                          check_response_status=[202])
        (finding,) = self.audit()
        self.assertEqual(('leaked_export', vol_id),
                         (finding.case, finding.volume_id))
        self.assertEqual(sorted(host.wwpns), sorted(
            finding.connector['wwpns']))
        self.assertEqual(['repaired'],
                         [f.result for f in self.audit(fix=True)])
        self.assert_torn_down(vol_id, host)
        self.assertEqual([], self.audit(fix=True))

    def test_mapping_lost_behind_cinders_back(self):
        vol_id, att, _info, host, _device = self.attached()
        self.array.unmap_volume('volume-%s' % vol_id)
        (finding,) = self.audit()
        self.assertEqual(('attached_not_exported', att['id']),
                         (finding.case, finding.attachment_id))
        self.assertEqual(['repaired'],
                         [f.result for f in self.audit(fix=True)])
        self.assert_torn_down(vol_id, host)
        self.assertEqual([], self.audit())
