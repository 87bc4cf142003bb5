"""LUN masking and zoning decisions of the Fibre Channel driver.

The driver runs against the real SQLite reference array (a file per test,
real transactions and locks) and Cinder's real ZoneManager and
FCSanLookupService.  Only the switch behind them is a recording fake
(:class:`tests.functional.fc_fabric.EmulatedSwitchZoneDriver` and its name
server): no FC switch can exist on this machine.  Its zones are rows of a
SQLite file that the assertions read.
"""

import contextlib
import os
import sqlite3
from unittest import mock
import uuid

from cinder import context
from cinder import exception
from cinder import objects
from cinder.tests.unit import fake_volume
from cinder.tests.unit import test
from cinder.volume import configuration
from cinder.volume import driver as volume_driver
import ddt
import fixtures

from cinder_forcedetach.arrays import base as array_base
from cinder_forcedetach.arrays import sqlite as sqlite_array
from cinder_forcedetach.drivers import fc
from cinder_forcedetach import opts
from tests.functional import fc_fabric

BACKEND = configuration.SHARED_CONF_GROUP
TARGETS = ['50:01:43:80:12:34:56:78', '0x5001438012345679']
PORTS = ['5001438012345678', '5001438012345679']
HOSTS = {'A': ['10000090fa000a01'],
         'B': ['10000090fa000b01', '10000090FA000B02'],
         'C': ['10000090fa000c01']}
TIMEOUT = 0.3


def connector(label, **extra):
    conn = {'host': 'compute-%s' % label, 'wwpns': list(HOSTS[label]),
            'platform': 'x86_64', 'os_type': 'linux', 'multipath': False}
    conn.update(extra)
    return conn


def wwpns(label):
    return [w.lower() for w in HOSTS[label]]


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


class FCTestCase(test.TestCase):
    """A driver on a fresh array file, with zoning on the fake switch."""

    MOCK_TOOZ = False

    def setUp(self):
        super(FCTestCase, self).setUp()
        tmp = self.useFixture(fixtures.TempDir()).path
        self.fabric_db = os.path.join(tmp, 'fabric.sqlite')
        fc_fabric.create_fabric_db(self.fabric_db, target_wwpns=TARGETS)
        fc_fabric.login_ports(self.fabric_db,
                              [w for ws in HOSTS.values() for w in ws])
        self.switch = fc_fabric.FabricState(self.fabric_db)
        for name, flag in fc_fabric.zoning_flags(self.fabric_db).items():
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
            self.volumes[label] = fake_volume.fake_volume_obj(
                self.ctxt, id=vol_id, size=1)
            self.driver.create_volume(self.volumes[label])
        vol = self.volumes[label]
        vol.volume_attachment = objects.VolumeAttachmentList(objects=[
            objects.VolumeAttachment(id=str(uuid.uuid4()), volume_id=vol.id,
                                     attach_status='attached',
                                     connector=connector(h))
            for h in attachments])
        return vol

    def attach(self, vol_label, host_label):
        return self.driver.initialize_connection(self.volume(vol_label),
                                                 connector(host_label))

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
        fc_fabric.login_ports(self.fabric_db, HOSTS['A'], online=False)
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
        with array_locked(self.array.path):
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
            lock.enter_context(array_locked(self.array.path))
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
        fc_fabric.login_ports(self.fabric_db, [HOSTS['B'][1]], online=False)
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


@ddt.ddt
class SqliteArrayTestCase(test.TestCase):
    """The reference array on its own: idempotence and failure modes."""

    def setUp(self):
        super(SqliteArrayTestCase, self).setUp()
        path = os.path.join(self.useFixture(fixtures.TempDir()).path,
                            'sub', 'array.db')
        self.array = sqlite_array.SqliteArray(path, timeout=TIMEOUT,
                                              target_ports=TARGETS)
        self.array.setup()
        self.array.setup()  # idempotent

    def test_ports(self):
        self.assertEqual(PORTS, self.array.target_ports())

    def test_hosts(self):
        self.assertEqual('h', self.array.ensure_host('h', wwpns('B')[:1]))
        # A connector with one more HBA extends the same host.
        self.assertEqual('h', self.array.ensure_host('other', wwpns('B')))
        self.assertEqual(wwpns('B'), self.array.host_wwpns('h'))
        # Same name, other WWPNs: another host.
        self.assertEqual('h-1', self.array.ensure_host('h', wwpns('A')))
        self.assertRaises(array_base.HostConflict, self.array.find_host,
                          wwpns('A') + wwpns('B'))
        self.assertIsNone(self.array.find_host(wwpns('C')))
        self.assertEqual([], self.array.host_wwpns('nope'))

    def test_map_unmap_idempotent(self):
        self.array.ensure_host('a', wwpns('A'))
        self.array.ensure_host('b', wwpns('B'))
        self.assertEqual(1, self.array.map_volume('v1', 'a'))
        self.assertEqual(1, self.array.map_volume('v1', 'a'))
        self.assertEqual(2, self.array.map_volume('v2', 'a'))
        self.assertEqual(1, self.array.map_volume('v1', 'b'))
        self.assertEqual(['b'], self.array.unmap_volume('v1', 'a'))
        self.assertEqual(['b'], self.array.unmap_volume('v1', 'a'))
        self.assertEqual(['b'], self.array.unmap_volume('v1', 'nope'))
        self.assertEqual([], self.array.unmap_volume('v1'))
        self.assertEqual([], self.array.unmap_volume('v1'))
        self.assertEqual({'v2': 2}, self.array.luns_of_host('a'))
        # The freed LUN id is reused.
        self.assertEqual(1, self.array.map_volume('v3', 'a'))
        self.assertRaises(array_base.ArrayError, self.array.map_volume,
                          'v1', 'nope')

    def test_delete_host(self):
        self.array.ensure_host('a', wwpns('A'))
        self.array.map_volume('v1', 'a')
        self.assertRaises(array_base.HostBusy, self.array.delete_host, 'a')
        self.array.unmap_volume('v1')
        self.array.delete_host('a')
        self.array.delete_host('a')
        self.assertIsNone(self.array.find_host(wwpns('A')))

    def test_busy_host(self):
        self.array.ensure_host('a', wwpns('A'))
        self.array.map_volume('v1', 'a')
        self.array.set_host_busy('a', 'held by session 7')
        before = self.array.dump()
        for call in (lambda: self.array.unmap_volume('v1', 'a'),
                     lambda: self.array.unmap_volume('v1'),
                     lambda: self.array.map_volume('v2', 'a')):
            err = self.assertRaises(array_base.HostBusy, call)
            self.assertIn('held by session 7', str(err))
        self.assertEqual(before, self.array.dump())
        # Already unmapped is a success even on a busy host.
        self.assertEqual([], self.array.unmap_volume('v9', 'a'))

    @ddt.data('target_ports', 'dump')
    def test_timeout_on_reads(self, method):
        with array_locked(self.array.path):
            self.assertRaises(array_base.ArrayTimeout,
                              getattr(self.array, method))

    def test_timeout_on_writes_changes_nothing(self):
        self.array.ensure_host('a', wwpns('A'))
        self.array.map_volume('v1', 'a')
        before = self.array.dump()
        conn = sqlite3.connect(self.array.path, isolation_level=None)
        conn.execute('BEGIN IMMEDIATE')  # a writer, readers still allowed
        try:
            self.assertRaises(array_base.ArrayTimeout,
                              self.array.unmap_volume, 'v1')
            self.assertEqual(before, self.array.dump())
        finally:
            conn.execute('ROLLBACK')
            conn.close()

    @ddt.unpack
    @ddt.data(('50:01:43:80:12:34:56:78', '5001438012345678'),
              ('0X500143801234567A', '500143801234567a'),
              (' 5001438012345678 ', '5001438012345678'))
    def test_normalize_wwpn(self, raw, expected):
        self.assertEqual(expected, array_base.normalize_wwpn(raw))

    @ddt.data('', '50014380123456', '5001438012345678aa', 'g001438012345678',
              '0000000000000000', 5001438012345678, None)
    def test_normalize_wwpn_refuses(self, raw):
        self.assertRaises(ValueError, array_base.normalize_wwpn, raw)


@ddt.ddt
class EmulatedScanWritesTestCase(test.TestCase):
    """The emulated kernel splits scan writes a FIFO has merged."""

    @ddt.unpack
    @ddt.data(('0 0 1', [['0', '0', '1']]),
              ('0 0 10 1 1', [['0', '0', '1'], ['0', '1', '1']]),
              ('0 0 120 1 12', [['0', '0', '12'], ['0', '1', '12']]),
              ('- - 3- - 4', [['-', '-', '3'], ['-', '-', '4']]),
              ('0 0 1\n0 1 1\n', [['0', '0', '1'], ['0', '1', '1']]),
              ('', []), ('0 0', []))
    def test_split(self, data, expected):
        self.assertEqual(expected, fc_fabric.split_scan_writes(data))
