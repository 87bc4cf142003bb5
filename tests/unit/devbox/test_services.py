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
import json
import os
import random
from unittest import mock

import fixtures
import testtools

from devbox import services
from devbox.services import base
from devbox import stack

#: Settings that enable every service of the box.
EVERYTHING = {'db': 'mariadb', 'coordination': 'etcd', 'keystone': True,
              'glance': True, 'nova': True, 'backup': True,
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
             'nova-scheduler', 'nova-compute'],
            services.process_order(EVERYTHING))

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
                'nova_port', 'placement_port', 'neutron_port'))})
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
