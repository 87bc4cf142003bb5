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

"""The box's service registry: order by requires, one list of processes."""

import argparse
import configparser
import json
import os
import random
from unittest import mock

import fixtures
import testtools

from devbox import computes
from devbox import services
from devbox.services import base
from devbox.services import cinder
from devbox.services import mariadb
from devbox import stack

#: Settings that enable every service of the box.
EVERYTHING = {'db': 'mariadb', 'coordination': 'etcd', 'keystone': True,
              'glance': True, 'nova': True, 'backup': True, 'horizon': True,
              'volume_services': 2,
              'backends': [['tgt', stack.TGT_DRIVER],
                           ['rbd', stack.RBD_DRIVER]]}


def service(name, requires=()):
    return type(name, (base.Service,), {'name': name, 'requires': requires})


class RegistryTestCase(testtools.TestCase):

    def test_every_service_starts_after_what_it_requires(self):
        for _ in range(20):
            classes = list(services.SERVICES)
            random.shuffle(classes)
            order = list(services.ordered(classes))
            for svc in services.ordered(classes).values():
                for required in svc.requires:
                    self.assertLess(order.index(required),
                                    order.index(svc.name), order)

    def test_ties_keep_the_listed_order(self):
        names = list(services.registry())
        self.assertEqual([cls.name for cls in services.SERVICES], names)

    def test_a_circle_or_an_unknown_requirement_is_refused(self):
        err = self.assertRaises(ValueError, services.ordered,
                                [service('a', ('b',)), service('b', ('a',))])
        self.assertIn('circular', str(err))
        err = self.assertRaises(ValueError, services.ordered,
                                [service('a', ('nope',))])
        self.assertIn('unknown nope', str(err))

    def test_the_full_box_starts_in_this_order(self):
        self.assertEqual(
            ['epmd', 'rabbitmq', 'mariadb', 'etcd', 'tgtd', 'keystone-api',
             'glance-api', 'placement-api', 'neutron-api',
             'cinder-scheduler', 'cinder-volume-1', 'cinder-volume-2',
             'cinder-backup', 'cinder-api', 'nova-api', 'nova-conductor',
             'nova-scheduler', 'nova-compute', 'horizon'],
            services.process_order(EVERYTHING))

    def test_libvirtd_before_the_compute_only_with_virt_libvirt(self):
        order = services.process_order(dict(EVERYTHING, virt='libvirt'))
        self.assertLess(order.index('libvirtd'), order.index('nova-api'))
        self.assertNotIn('libvirtd', services.process_order(EVERYTHING))
        self.assertNotIn('libvirtd', services.process_order(
            dict(EVERYTHING, nova=False, virt='libvirt')))

    def test_the_smallest_box(self):
        self.assertEqual(
            ['epmd', 'rabbitmq', 'tgtd', 'cinder-scheduler', 'cinder-volume',
             'cinder-api'],
            services.process_order({'db': 'sqlite', 'backends': []}))

    def test_each_process_has_one_owner(self):
        registry = services.registry()
        known = [name for svc in registry.values()
                 for name in svc.known_processes()]
        self.assertEqual(len(known), len(set(known)))
        for name in services.process_order(EVERYTHING):
            self.assertIn(name, known)
            self.assertIn(name, services.owner(registry, name)
                          .known_processes())

    def test_every_listening_port_belongs_to_a_service(self):
        info = dict(EVERYTHING, host='127.0.0.1', **{
            key: 20000 + i for i, key in enumerate((
                'api_port', 'rabbit_port', 'epmd_port', 'iscsi_port',
                'db_port', 'etcd_port', 'glance_port', 'keystone_port',
                'nova_port', 'placement_port', 'neutron_port',
                'horizon_port'))})
        claimed = [port for svc in services.registry().values()
                   if svc.enabled(info)
                   for ports in svc.ports(info).values() for port in ports]
        for key in info:
            if key.endswith('_port'):
                self.assertIn(info[key], claimed, key)


class ContextTestCase(testtools.TestCase):

    def context(self):
        state = self.useFixture(fixtures.TempDir()).path
        with mock.patch.dict(os.environ, {'STACK_DIR': state}, clear=True):
            box = stack.Stack(stack.Settings(argparse.Namespace(
                state_dir=None)))
        return box.ctx

    def test_secrets_cover_every_database_and_user_once(self):
        ctx = self.context()
        first = ctx.secrets()
        self.assertEqual(0o600, os.stat(ctx.secrets_path).st_mode & 0o777)
        for svc in ctx.registry.values():
            for key in svc.databases.values():
                self.assertIn(key, first)
            for user in svc.keystone_users:
                self.assertIn(user + '_password', first)
        self.assertEqual(first, ctx.secrets())

    def test_a_key_added_later_is_made_and_the_others_kept(self):
        ctx = self.context()
        first = ctx.secrets()
        with open(ctx.secrets_path) as f:
            data = json.load(f)
        del data['nova_db_password']
        with open(ctx.secrets_path, 'w') as f:
            json.dump(data, f)
        again = ctx.secrets()
        self.assertEqual(first['admin_password'], again['admin_password'])
        self.assertEqual(32, len(again['nova_db_password']))

    def test_sqlite_without_mariadb(self):
        ctx = self.context()
        ctx.info = {'db': 'sqlite'}
        self.assertEqual('sqlite:///d/glance.sqlite',
                         ctx.database_url('glance', 'd'))


class LibvirtServiceTestCase(testtools.TestCase):
    """libvirtd of ``--virt libvirt``: the box's directories, not /etc."""

    def setUp(self):
        super(LibvirtServiceTestCase, self).setUp()
        self.ctx = mock.Mock(dir=self.useFixture(fixtures.TempDir()).path,
                             info={'nova': True, 'virt': 'libvirt'})
        self.svc = services.registry()['libvirtd']

    def test_its_directories_are_bound_over_the_machines(self):
        self.svc.write_conf(self.ctx)
        argv = self.svc.argv(self.ctx)
        self.assertEqual(['unshare', '--mount', '--propagation', 'private',
                          '--uts'], argv[:5])
        script = argv[7]
        self.assertIn('echo box-compute > /proc/sys/kernel/hostname', script)
        for sub, target in (('etc', '/etc/libvirt'), ('run', '/run/libvirt'),
                            ('lib', '/var/lib/libvirt')):
            self.assertIn('mount --bind %s %s' % (
                os.path.join(self.ctx.dir, 'libvirt', sub), target), script)
        with open(os.path.join(self.ctx.dir, 'libvirt', 'etc',
                               'qemu.conf')) as f:
            qemu_conf = f.read()
        self.assertIn('cgroup_controllers = [ ]', qemu_conf)
        self.assertIn('stdio_handler = "file"', qemu_conf)
        self.assertEqual(
            'qemu+unix:///system?socket=%s/libvirt/run/libvirt-sock' %
            self.ctx.dir, self.svc.uri(self.ctx))

    def test_a_second_compute_has_its_own_daemon_directories_and_name(self):
        """Two libvirtds of one machine share no socket, state or node name.

        libvirt names Nova's node after its hostname: the second daemon's
        UTS namespace names it after its compute host.
        """
        self.ctx.info['computes'] = 2
        self.assertEqual(['libvirtd', 'libvirtd-2'],
                         self.svc.processes(self.ctx.info))
        self.svc.write_conf(self.ctx)
        script = self.svc.argv(self.ctx, 'box-compute-2')[7]
        self.assertIn('echo box-compute-2 > /proc/sys/kernel/hostname',
                      script)
        self.assertIn('mount --bind %s /run/libvirt' % os.path.join(
            self.ctx.dir, 'libvirt-2', 'run'), script)
        self.assertTrue(os.path.isfile(os.path.join(
            self.ctx.dir, 'libvirt-2', 'etc', 'qemu.conf')))
        self.assertNotEqual(self.svc.uri(self.ctx),
                            self.svc.uri(self.ctx, 'box-compute-2'))
        self.assertEqual('box-compute-2',
                         computes.host_of('libvirtd-2', 'libvirtd'))
        self.assertIsNone(computes.host_of('nova-api', 'nova-compute'))

    def test_the_ceph_key_never_reaches_an_argument(self):
        keyring = os.path.join(self.ctx.dir, 'keyring')
        with open(keyring, 'w') as f:
            f.write('[client.cinder]\n\tkey = QUFBQQ==\n')
        os.makedirs(os.path.join(self.ctx.dir, 'libvirt'))
        calls = []

        def virsh(ctx, *args, **kwargs):
            if args[0] == 'secret-set-value':
                with open(args[args.index('--file') + 1]) as f:
                    calls.append((args, f.read()))
            else:
                calls.append((args, None))
        self.svc.virsh = virsh
        self.svc.ensure_ceph_secret(self.ctx, 'cinder', keyring)
        self.assertEqual('secret-define', calls[0][0][0])
        self.assertEqual('QUFBQQ==', calls[1][1])
        for args, _content in calls:
            self.assertNotIn('QUFBQQ==', ' '.join(args))


class NovaComputesTestCase(testtools.TestCase):
    """``--computes 2``: a second nova-compute on its own files."""

    def test_the_second_compute_reads_its_own_file_over_nova_conf(self):
        ctx = mock.Mock(dir=self.useFixture(fixtures.TempDir()).path,
                        info={'nova': True, 'virt': 'libvirt',
                              'computes': 2})
        ctx.service.return_value = services.registry()['libvirtd']
        nova = services.registry()['nova']
        self.assertEqual(['nova-api', 'nova-conductor', 'nova-scheduler',
                          'nova-compute', 'nova-compute-2'],
                         nova.processes(ctx.info))
        nova._write_compute_confs(ctx)
        first = nova.compute_conf_args(ctx)
        second = nova.compute_conf_args(ctx, 'box-compute-2')
        self.assertEqual(first, second[:2])
        parser = configparser.ConfigParser()
        parser.read(second[3])
        self.assertEqual('box-compute-2', parser['DEFAULT']['host'])
        nova_dir = os.path.join(ctx.dir, 'nova')
        for key, sub in (('state_path', 'state-2'),
                         ('instances_path', 'instances-2')):
            self.assertEqual(os.path.join(nova_dir, sub),
                             parser['DEFAULT'][key])
            self.assertTrue(os.path.isdir(parser['DEFAULT'][key]))
        self.assertIn(os.path.join(ctx.dir, 'libvirt-2', 'run'),
                      parser['libvirt']['connection_uri'])


class NovaOfferedTestCase(testtools.TestCase):
    """Ready once placement offers every compute host, disabled or not."""

    def offered(self, candidates):
        ctx = mock.Mock(info={'nova': True, 'computes': 2})
        ctx.service.return_value.url.return_value = 'http://placement'
        providers = {'resource_providers': [
            {'name': 'box-compute', 'uuid': 'u1'},
            {'name': 'box-compute-2', 'uuid': 'u2'}]}

        def http_json(url, method, body=None, headers=None):
            if '/allocation_candidates' in url:
                self.assertNotIn('COMPUTE_STATUS_DISABLED', url)
                return {'provider_summaries': {u: {} for u in candidates}}
            return providers
        ctx.http_json.side_effect = http_json
        return services.registry()['nova']._offered(ctx)

    def test_every_compute_host_offered(self):
        self.assertTrue(self.offered(['u1', 'u2']))

    def test_a_host_without_inventory_yet(self):
        """Up in os-services, its node known, its inventory not in yet."""
        self.assertFalse(self.offered(['u2']))
        self.assertFalse(self.offered([]))


class HorizonServiceTestCase(testtools.TestCase):
    """Horizon's local settings: in the box's directory, our panel on."""

    def test_local_settings(self):
        state = self.useFixture(fixtures.TempDir()).path
        ctx = mock.Mock(dir=state, info={'host': '127.0.0.1'},
                        secrets_path=os.path.join(state, 'secrets.json'))
        ctx.service.return_value.url.return_value = 'http://127.0.0.1:5000'
        ctx.secrets.return_value = {'horizon_secret_key': 'sekrit'}
        svc = services.registry()['horizon']
        path = svc.write_conf(ctx)
        self.assertEqual(os.path.join(state, 'horizon', 'local',
                                      'local_settings.py'), path)
        self.assertTrue(os.path.exists(os.path.join(
            os.path.dirname(path), '__init__.py')))
        with open(path) as f:
            text = f.read()
        # Read from secrets.json when Horizon starts, not written here.
        self.assertNotIn('sekrit', text)
        self.assertIn(repr(ctx.secrets_path), text)
        self.assertIn('cinder_forcedetach.dashboard.ENABLED_DIR', text)
        self.assertIn("OPENSTACK_KEYSTONE_URL = 'http://127.0.0.1:5000/v3'",
                      text)
        self.assertEqual(0o600, os.stat(path).st_mode & 0o777)
        compile(text, path, 'exec')
        self.assertEqual(('keystone-api', 'cinder'), svc.requires)
        self.assertFalse(svc.enabled({'keystone': True}))
        self.assertTrue(svc.enabled({'horizon': True}))


class CinderStartTestCase(testtools.TestCase):
    """A second ``up`` does not sync Cinder's database again."""

    def start(self, api_alive):
        cinder = services.registry()['cinder']
        ctx = mock.Mock(info={'volume_services': 1},
                        dir=self.useFixture(fixtures.TempDir()).path)
        ctx.s.timeout = 1
        ctx.proc.return_value.alive.return_value = api_alive
        self.useFixture(fixtures.MockPatchObject(cinder, 'write_conf'))
        self.useFixture(fixtures.MockPatchObject(cinder, 'ready'))
        self.useFixture(fixtures.MockPatchObject(cinder, '_ensure_types'))
        self.useFixture(fixtures.MockPatchObject(cinder, 'conf_path',
                                                 return_value='c.conf'))
        cinder.start(ctx)
        return ctx.manage.call_args_list

    def test_synced_before_its_api_starts(self):
        self.assertEqual([mock.call('cinder-manage', [
            '--config-file', 'c.conf', 'db', 'sync'])], self.start(False))

    def test_not_again_while_its_api_runs(self):
        # cinder-api starts after the sync: alive, the sync was done.
        self.assertEqual([], self.start(True))


class CinderReportedSinceStartTestCase(testtools.TestCase):
    """A volume service restarted alone is ready on its own report."""

    STARTED = 1800000000.0  # 2027-01-15T08:00:00 UTC

    def reported(self, updated_at, volume_services=1, started=STARTED):
        ctx = mock.Mock(info={'volume_services': volume_services})
        ctx.proc.side_effect = lambda name: mock.Mock(
            record={'started': started[name] if isinstance(started, dict)
                    else started})
        hosts = ['box@tgt'] if volume_services == 1 else [
            'cinder-volume-1@tgt', 'cinder-volume-2@tgt']
        services_ = [{'binary': 'cinder-volume', 'host': host,
                      'updated_at': at}
                     for host, at in zip(hosts, updated_at)]
        services_.append({'binary': 'cinder-scheduler', 'host': 'box',
                          'updated_at': '2000-01-01T00:00:00.000000'})
        return services.registry()['cinder'].reported_since_start(
            ctx, services_)

    def test_the_predecessors_last_report_is_not_enough(self):
        # Within service_down_time, so 'up', yet before the start (and
        # within the second the database may round to).
        self.assertFalse(self.reported(['2027-01-15T07:59:55.000000']))
        self.assertFalse(self.reported(['2027-01-15T08:00:01.000000']))
        self.assertFalse(self.reported([None]))

    def test_a_report_after_the_start(self):
        self.assertTrue(self.reported(['2027-01-15T08:00:02.000000']))

    def test_each_process_of_several_by_its_own_host(self):
        started = {'cinder-volume-1': self.STARTED,
                   'cinder-volume-2': self.STARTED + 60}
        self.assertFalse(self.reported(
            ['2027-01-15T08:00:30.000000', '2027-01-15T08:00:30.000000'],
            volume_services=2, started=started))
        self.assertTrue(self.reported(
            ['2027-01-15T08:00:30.000000', '2027-01-15T08:01:30.000000'],
            volume_services=2, started=started))


class MariaDBInstallTestCase(testtools.TestCase):
    """A failed ``mariadb-install-db`` reports the server's own errors."""

    def test_the_errors_not_the_closing_advice(self):
        tmp = self.useFixture(fixtures.TempDir()).path
        ctx = mock.Mock(dir=tmp, log_dir=tmp,
                        info={'host': '127.0.0.1', 'db_port': 1})
        ctx.proc.return_value.alive.return_value = False

        def install(argv, stdout, **kwargs):
            stdout.write(b'2026-11-29 [ERROR] InnoDB: io_setup() failed\n'
                         b'Installation of system tables failed!\n'
                         b"Try '/usr/sbin/mariadbd --help' if you have "
                         b'problems with paths.\n')
            return mock.Mock(returncode=1)
        self.useFixture(fixtures.MockPatchObject(
            mariadb.subprocess, 'run', side_effect=install))
        self.useFixture(fixtures.MockPatchObject(
            mariadb.boxutil, 'which', return_value='/usr/sbin/x'))
        err = self.assertRaises(base.StackError, mariadb.MariaDB().start,
                                ctx)
        self.assertIn('io_setup() failed', str(err))
        self.assertNotIn('--help', str(err))

    def test_a_bare_abort_comes_with_the_lines_before_it(self):
        out = os.path.join(self.useFixture(fixtures.TempDir()).path, 'out')
        with open(out, 'w') as f:
            f.write('a\n[Note] starting\n\n[Warning] the cause\n'
                    '[ERROR] Aborting\nInstallation failed!\n'
                    "Try '--help'\n")
        self.assertEqual(
            '\n  a\n  [Note] starting\n  [Warning] the cause\n'
            '  [ERROR] Aborting', mariadb.first_errors(out, before=3))


class VolumeServiceGroupTestCase(testtools.TestCase):
    """With several volume services, each starts in a cgroup of its own."""

    def setUp(self):
        super(VolumeServiceGroupTestCase, self).setUp()
        self.group_dir = self.useFixture(fixtures.MockPatchObject(
            cinder.partitions, 'group_dir', return_value='/g')).mock

    def group(self, name, count):
        ctx = mock.Mock(dir='/tmp/cfd-cluster-x',
                        info={'volume_services': count})
        return cinder.Cinder.own_group(ctx, name)

    def test_each_volume_service_of_several(self):
        self.assertIsNotNone(self.group('cinder-volume-2', 2))
        self.group_dir.assert_called_once_with('box-cfd-cluster-x',
                                               'cinder-volume-2')

    def test_not_the_api_nor_a_single_volume_service(self):
        self.assertIsNone(self.group('cinder-api', 2))
        self.assertIsNone(self.group('cinder-volume', 1))
        self.group_dir.assert_not_called()
