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

"""LUN masking and zoning decisions of the Fibre Channel driver.

The driver runs against the real SQLite reference array (a file per test,
real transactions and locks) and Cinder's real ZoneManager and
FCSanLookupService.  Only the switch behind them is a recording fake
(:class:`tests.functional.fakes.EmulatedSwitchZoneDriver` and its name
server): no FC switch can exist on this machine.  Its zones are rows of a
SQLite file that the assertions read.
"""

import contextlib
import os
from unittest import mock
import uuid

from cinder import context
from cinder import exception
from cinder import objects
from cinder.tests.unit import test
from cinder.tests.unit import utils as test_utils
from cinder.volume import configuration
from cinder.volume import driver as volume_driver
import ddt
import fixtures

from cinder_forcedetach.arrays import base as array_base
# imported for its options (forcedetach_fc_array_db, ...)
from cinder_forcedetach.arrays import sqlite  # noqa: F401
from cinder_forcedetach.drivers import fc
from cinder_forcedetach import opts
from tests import fakes

BACKEND = configuration.SHARED_CONF_GROUP
TARGETS = fakes.FC_TARGETS
PORTS = fakes.FC_PORTS
HOSTS = fakes.FC_HOSTS
TIMEOUT = fakes.FC_ARRAY_TIMEOUT


def connector(label, **extra):
    conn = {'host': 'compute-%s' % label, 'wwpns': list(HOSTS[label]),
            'platform': 'x86_64', 'os_type': 'linux', 'multipath': False}
    conn.update(extra)
    return conn


wwpns = fakes.fc_wwpns


class FCTestCase(test.TestCase):
    """A driver on a fresh array file, with zoning on the fake switch."""

    MOCK_TOOZ = False

    def setUp(self):
        super(FCTestCase, self).setUp()
        tmp = self.useFixture(fixtures.TempDir()).path
        self.fabric_db = os.path.join(tmp, 'fabric.sqlite')
        fakes.create_fabric_db(self.fabric_db, target_wwpns=TARGETS)
        fakes.login_ports(self.fabric_db,
                          [w for ws in HOSTS.values() for w in ws])
        self.switch = fakes.FabricState(self.fabric_db)
        for name, flag in fakes.zoning_flags(self.fabric_db).items():
            self.override_config(name, flag['v'], flag.get('g'))
        for name, value in (
                ('forcedetach_volumes_dir', os.path.join(tmp, 'volumes')),
                ('forcedetach_fc_array_db', os.path.join(tmp, 'array.db')),
                ('forcedetach_fc_target_wwpns', TARGETS),
                ('forcedetach_fc_array_timeout', TIMEOUT)):
            self.override_config(name, value, BACKEND)
        self.ctxt = context.get_admin_context()
        self.driver = fc.FibreChannelDriver(
            configuration=configuration.Configuration(
                volume_driver.volume_opts, config_group='fc_unit'))
        self.driver.do_setup(self.ctxt)
        self.driver.check_for_setup_error()
        self.array = self.driver.array
        self.volumes = {}

    def volume(self, label, attachments=()):
        """A volume object; *attachments* are host labels (live)."""
        if label not in self.volumes:
            vol_id = str(uuid.uuid5(uuid.NAMESPACE_URL, label))
            # A row in Cinder's test database, as the volume service
            # has it while a host attaches: the grant checks it.
            self.volumes[label] = test_utils.create_volume(
                self.ctxt, id=vol_id, size=1, status='reserved')
            self.driver.create_volume(self.volumes[label])
        vol = self.volumes[label]
        vol.volume_attachment = objects.VolumeAttachmentList(objects=[
            objects.VolumeAttachment(id=str(uuid.uuid4()), volume_id=vol.id,
                                     attach_status='attached',
                                     connector=connector(h))
            for h in attachments])
        return vol

    def attach(self, vol_label, host_label):
        """A grant, then the attachment row Cinder stores after it.

        Without the row, a later grant to another host would find this
        host's mapping unexplained and cut it (fence on grant).
        """
        vol = self.volume(vol_label)
        info = self.driver.initialize_connection(vol, connector(host_label))
        objects.VolumeAttachment(
            context=self.ctxt, volume_id=vol.id, attach_status='attached',
            connector=connector(host_label)).create()
        return info

    def maps(self):
        """{volume label: sorted host labels} as the array has them."""
        names = {v.name: k for k, v in self.volumes.items()}
        return {names[vol]: sorted(h.rsplit('-', 1)[1] for h in hosts)
                for vol, hosts in self.array.dump()['maps'].items()}

    def zoned(self):
        """Host labels that have at least one zone."""
        initiators = self.switch.zoned_initiators()
        return {h for h in HOSTS if set(wwpns(h)) & initiators}

    def assert_zones_complete(self, label):
        """Every initiator of the host is zoned with every target port."""
        zones = self.switch.zones()
        for initiator in wwpns(label):
            for port in PORTS:
                self.assertIn((initiator, port), zones)


@ddt.ddt
class MaskingAndZoningTestCase(FCTestCase):

    @ddt.unpack
    @ddt.data(
        # (case, attach [(volume, host)], revoke (volume, host or None),
        #  maps after, zoned hosts after, returned "still shared")
        ('last LUN of the host: zone removed',
         [('v1', 'A')], ('v1', 'A'), {}, set(), False),
        ('shared initiator: another LUN keeps the zone',
         [('v1', 'A'), ('v2', 'A')], ('v1', 'A'), {'v2': ['A']}, {'A'},
         False),
        ('other host keeps the volume and its zone',
         [('v1', 'A'), ('v1', 'B')], ('v1', 'A'), {'v1': ['B']}, {'B'},
         True),
        ('connector None: every host unmapped',
         [('v1', 'A'), ('v1', 'B')], ('v1', None), {}, set(), False),
        ('connector None: a host with another LUN keeps its zone',
         [('v1', 'A'), ('v1', 'B'), ('v2', 'B')], ('v1', None),
         {'v2': ['B']}, {'B'}, False),
        ('already unmapped: success, other LUN keeps the zone',
         [('v2', 'A')], ('v1', 'A'), {'v2': ['A']}, {'A'}, False),
        ('host unknown to the array: success',
         [('v2', 'B')], ('v1', 'C'), {'v2': ['B']}, {'B'}, False),
    )
    def test_revoke(self, _case, attachments, revoke, maps, zoned, shared):
        for vol, host in attachments:
            self.attach(vol, host)
        vol, host = revoke
        volume = self.volume(vol)
        conn = None if host is None else connector(host)
        for _run in range(2):  # the second run finds everything done
            self.assertEqual(shared,
                             self.driver.revoke_host_access(volume, conn))
            self.assertEqual(maps, self.maps())
            self.assertEqual(zoned, self.zoned())
        for label in zoned:
            self.assert_zones_complete(label)

    def test_zones_of_a_dead_host_are_removed(self):
        """A dead host's HBAs left the name server; its zones still go."""
        self.attach('v1', 'A')
        fakes.login_ports(self.fabric_db, HOSTS['A'], online=False)
        self.driver.revoke_host_access(self.volume('v1'), connector('A'))
        self.assertEqual(({}, set()), (self.maps(), self.switch.zones()))

    def test_delete_volume_removes_stale_maps_and_zones(self):
        self.attach('v1', 'A')
        self.attach('v2', 'B')
        volume = self.volume('v1')
        self.driver.delete_volume(volume)
        self.assertEqual({'v2': ['B']}, self.maps())
        self.assertEqual({'B'}, self.zoned())
        self.assertFalse(os.path.exists(self.driver.local_path(volume)))


@ddt.ddt
class FailureTestCase(FCTestCase):

    def state(self):
        return self.array.dump(), self.switch.zones()

    @ddt.unpack
    @ddt.data(
        # (revoke host, volume, maps and zoned hosts once the array answers)
        ('A', 'v1', {'v1': ['B']}, {'B'}),
        (None, 'v1', {}, set()),
        ('A', 'v2', {'v1': ['A', 'B']}, {'A', 'B'}),
    )
    def test_array_timeout_changes_nothing(self, host, vol, maps, zoned):
        self.attach('v1', 'A')
        self.attach('v1', 'B')
        before = self.state()
        conn = None if host is None else connector(host)
        with fakes.array_locked(self.array.path):
            err = self.assertRaises(array_base.ArrayTimeout,
                                    self.driver.revoke_host_access,
                                    self.volume(vol), conn)
        self.assertIn('timed out', str(err))
        self.assertEqual(before, self.state())
        # Once the array answers again, the same call converges.
        self.driver.revoke_host_access(self.volume(vol), conn)
        self.assertEqual((maps, zoned), (self.maps(), self.zoned()))

    @ddt.data('A', None)
    def test_host_busy_changes_nothing(self, host):
        self.attach('v1', 'A')
        before = self.state()
        self.array.set_host_busy('compute-A', 'firmware upgrade')
        conn = None if host is None else connector(host)
        err = self.assertRaises(array_base.HostBusy,
                                self.driver.revoke_host_access,
                                self.volume('v1'), conn)
        self.assertIn('firmware upgrade', str(err))
        self.array.set_host_busy('compute-A', None)
        self.assertEqual(before, self.state())
        self.driver.revoke_host_access(self.volume('v1'), conn)
        self.assertEqual(({}, set()), (self.maps(), self.zoned()))

    @ddt.data('A', None)
    def test_interrupted_after_unmap_rerun_removes_zones(self, host):
        """The array times out between the unmap and the zone decision."""
        self.attach('v1', 'A')
        volume = self.volume('v1', attachments=['A'])
        real_unmap = self.array.unmap_volume
        lock = contextlib.ExitStack()

        def unmap_then_lock(*args, **kwargs):
            remaining = real_unmap(*args, **kwargs)
            lock.enter_context(fakes.array_locked(self.array.path))
            return remaining

        conn = None if host is None else connector(host)
        with mock.patch.object(self.array, 'unmap_volume', unmap_then_lock):
            self.assertRaises(array_base.ArrayTimeout,
                              self.driver.revoke_host_access, volume, conn)
        lock.close()
        self.assertEqual(({}, {'A'}), (self.maps(), self.zoned()))
        self.assertFalse(self.driver.revoke_host_access(volume, conn))
        self.assertEqual(({}, set()), (self.maps(), self.zoned()))

    def test_switch_failure_then_rerun(self):
        self.attach('v1', 'A')
        self.switch.inject_fault('delete_connection')
        volume = self.volume('v1', attachments=['A'])
        self.assertRaises(exception.ZoneManagerException,
                          self.driver.revoke_host_access, volume, None)
        self.assertEqual(({}, {'A'}), (self.maps(), self.zoned()))
        self.driver.revoke_host_access(volume, None)
        self.assertEqual(({}, set()), (self.maps(), self.zoned()))


@ddt.ddt
class ConnectionTestCase(FCTestCase):

    def test_initialize_connection(self):
        info = self.attach('v1', 'B')
        lun = self.array.hosts_of_volume(self.volume('v1').name)['compute-B']
        self.assertEqual(
            {'driver_volume_type': 'fibre_channel',
             'data': {'target_discovered': False,
                      'target_lun': lun,
                      'target_wwn': PORTS,
                      'initiator_target_map': {w: PORTS for w in wwpns('B')},
                      'volume_id': self.volume('v1').id,
                      'discard': True}}, info)
        self.assertEqual({'B'}, self.zoned())
        self.assert_zones_complete('B')
        # Idempotent: the same LUN again, zones unchanged.
        self.assertEqual(info, self.attach('v1', 'B'))
        # Another volume gets another LUN id on that host.
        self.assertNotEqual(lun, self.attach('v2', 'B')['data']['target_lun'])

    def test_lookup_service_limits_the_map_to_logged_in_ports(self):
        fakes.login_ports(self.fabric_db, [HOSTS['B'][1]], online=False)
        info = self.attach('v1', 'B')
        self.assertEqual({wwpns('B')[0]: PORTS},
                         info['data']['initiator_target_map'])
        # Removal still names both initiators.
        self.driver.revoke_host_access(self.volume('v1'), connector('B'))
        self.assertEqual(set(), self.switch.zones())

    @ddt.data({}, {'wwpns': []}, {'wwpns': 'abc'}, {'wwpns': ['xyz']},
              {'wwpns': ['10000090fa000a01', '10000090fa000a0']},
              {'wwpns': ['0000000000000000']}, {'wwpns': [None]},
              {'initiator': 'iqn.2004-10.com.example:host'})
    def test_bad_connector_is_refused_and_changes_nothing(self, bad):
        self.attach('v1', 'A')
        before = (self.array.dump(), self.switch.zones())
        conn = {'host': 'compute-X'}
        conn.update(bad)
        for call in (self.driver.validate_connector,
                     lambda c: self.driver.initialize_connection(
                         self.volume('v2'), c),
                     lambda c: self.driver.revoke_host_access(
                         self.volume('v1'), c)):
            err = self.assertRaises(exception.InvalidConnectorException,
                                    call, conn)
            self.assertIn('wwpns', str(err))
        self.assertEqual(before, (self.array.dump(), self.switch.zones()))

    def test_wwpn_formats_are_normalised(self):
        conn = connector('A', wwpns=['10:00:00:90:FA:00:0A:01'])
        self.driver.initialize_connection(self.volume('v1'), conn)
        self.assertEqual({'v1': ['A']}, self.maps())
        self.driver.revoke_host_access(self.volume('v1'), connector('A'))
        self.assertEqual(({}, set()), (self.maps(), self.zoned()))

    def test_zoning_failure_unmaps_a_new_map_only(self):
        self.attach('v1', 'A')
        self.switch.inject_fault('add_connection', count=2)
        self.assertRaises(exception.ZoneManagerException,
                          self.attach, 'v2', 'A')
        self.assertRaises(exception.ZoneManagerException,
                          self.attach, 'v1', 'A')
        self.assertEqual({'v1': ['A']}, self.maps())

    def test_local_connection_info(self):
        self.assertIsNone(self.driver.local_connection_info(
            self.volume('v1'), connector('A')))
        info = self.attach('v1', 'A')
        local = self.driver.local_connection_info(self.volume('v1'),
                                                  connector('A'))
        self.assertEqual(info['data']['target_lun'],
                         local['data']['target_lun'])
        self.assertEqual('fibre_channel', local['driver_volume_type'])
        self.assertIsNone(self.driver.local_connection_info(
            self.volume('v1'), {'host': 'x'}))

    def test_exports_are_no_ops(self):
        self.attach('v1', 'A')
        self.driver.create_export(self.ctxt, self.volume('v1'), None)
        self.driver.ensure_export(self.ctxt, self.volume('v1'))
        self.driver.remove_export(self.ctxt, self.volume('v1'))
        self.assertEqual(({'v1': ['A']}, {'A'}), (self.maps(), self.zoned()))

    def test_stats(self):
        stats = self.driver.get_volume_stats(refresh=True)
        self.assertEqual(('FC', 'fc_forcedetach'),
                         (stats['storage_protocol'],
                          stats['volume_backend_name']))


class SetupTestCase(FCTestCase):

    def test_bad_target_wwpn_is_a_configuration_error(self):
        self.override_config('forcedetach_fc_target_wwpns', ['nope'],
                             BACKEND)
        driver = fc.FibreChannelDriver(
            configuration=configuration.Configuration(
                volume_driver.volume_opts, config_group='fc_unit'))
        err = self.assertRaises(exception.InvalidConfigurationValue,
                                driver.do_setup, self.ctxt)
        self.assertIn('forcedetach_fc_target_wwpns', str(err))

    def test_no_target_port_fails_setup_check(self):
        self.override_config('forcedetach_fc_target_wwpns', [], BACKEND)
        self.override_config('forcedetach_fc_array_db',
                             self.array.path + '.empty', BACKEND)
        driver = fc.FibreChannelDriver(
            configuration=configuration.Configuration(
                volume_driver.volume_opts, config_group='fc_unit'))
        driver.do_setup(self.ctxt)
        self.assertRaises(exception.VolumeDriverException,
                          driver.check_for_setup_error)

    def test_options(self):
        listed = {o.dest for _g, group in opts.list_opts() for o in group}
        for opt in fc.FibreChannelDriver.get_driver_options():
            self.assertIn(opt.dest, listed)
        self.assertIn('forcedetach_fc_array_db', listed)
        self.assertIn('forcedetach_volumes_dir', listed)
