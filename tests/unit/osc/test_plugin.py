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

"""The plugin module: OpenStackClient's interface, the client it makes, the
entry points an ``openstack`` process finds, and one ``openstack`` run.
"""

import argparse
import configparser
import json
import os
import subprocess
import sys
import tempfile

import fixtures
from keystoneauth1 import exceptions as ks_exc
from osc_lib import exceptions
import testtools

from cinder_forcedetach.cmd import api_client
from cinder_forcedetach.osc import plugin
from tests.unit.osc import fakes

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))
OPENSTACK = os.path.join(os.path.dirname(sys.executable), 'openstack')
COMMANDS = {
    'volume_force_detach':
        'cinder_forcedetach.osc.v1.volume:ForceDetachVolume',
    'volume_attachment_connection_show':
        'cinder_forcedetach.osc.v1.volume:ShowVolumeAttachmentConnection',
    'volume_audit': 'cinder_forcedetach.osc.v1.volume:AuditVolumes',
}
# What an ``openstack`` process sees: run from another directory, so that
# a stale egg-info in the repository cannot hide the installed metadata.
LIST_ENTRY_POINTS = """
import json
from importlib.metadata import entry_points
print(json.dumps({g: {e.name: e.value for e in entry_points(group=g)}
                  for g in ('openstack.cli.extension',
                            'openstack.forcedetach.v1')}))
"""


class FakeInstance(object):
    """OpenStackClient's ClientManager, as make_client uses it."""

    region_name = 'RegionOne'
    interface = 'internal'

    def __init__(self, catalog, config=None, api_version=None):
        self.catalog = catalog
        self.config = config or {}
        self._api_version = api_version or {}
        self.session = object()
        self.asked = []

    def get_endpoint_for_service_type(self, service_type, region_name=None,
                                      interface='public'):
        self.asked.append((service_type, region_name, interface))
        if service_type in self.catalog:
            return self.catalog[service_type]
        raise ks_exc.EndpointNotFound()

    def get_configuration(self):
        return dict(self.config)


class PluginModuleTestCase(testtools.TestCase):

    def test_interface_attributes(self):
        self.assertEqual('forcedetach', plugin.API_NAME)
        self.assertEqual('os_forcedetach_api_version',
                         plugin.API_VERSION_OPTION)
        self.assertEqual(['1'], list(plugin.API_VERSIONS))
        self.assertIn(plugin.DEFAULT_API_VERSION, plugin.API_VERSIONS)
        self.assertTrue(callable(plugin.make_client))
        self.assertTrue(callable(plugin.build_option_parser))

    def test_global_options(self):
        for var in ('OS_FORCEDETACH_API_VERSION',
                    'OS_FORCEDETACH_SERVICE_TOKEN'):
            self.useFixture(fixtures.EnvironmentVariable(var, None))
        parser = plugin.build_option_parser(argparse.ArgumentParser())
        args = parser.parse_args([])
        # The version option's dest is API_VERSION_OPTION.
        self.assertIsNone(getattr(args, plugin.API_VERSION_OPTION))
        self.assertIsNone(args.os_forcedetach_service_token)
        args = parser.parse_args(['--os-forcedetach-api-version', '1',
                                  '--os-forcedetach-service-token'])
        self.assertEqual('1', args.os_forcedetach_api_version)
        self.assertTrue(args.os_forcedetach_service_token)

    def test_volume_api_version(self):
        for requested, sent in ((None, '3.27'), ('3', '3.27'),
                                ('2', '3.27'), ('3.0', '3.27'),
                                ('3.27', '3.27'), ('3.70', '3.70'),
                                ('latest', '3.27')):
            self.assertEqual(sent, plugin.volume_api_version(requested),
                             requested)

    def test_make_client_from_the_catalog(self):
        instance = FakeInstance({'volumev3': 'http://cinder:8776/v3/p/'},
                                api_version={'volume': '3.70'})
        client = plugin.make_client(instance)
        self.assertIsInstance(client, api_client.Client)
        self.assertIs(instance.session, client.session)
        self.assertEqual('http://cinder:8776/v3/p', client.endpoint)
        self.assertEqual('3.70', client.api_version)
        self.assertFalse(client.service_token)
        # block-storage first, in the region and interface asked for.
        self.assertEqual([('block-storage', 'RegionOne', 'internal'),
                          ('volumev3', 'RegionOne', 'internal')],
                         instance.asked)

    def test_make_client_service_token_from_config(self):
        for value, wanted in (('true', True), (True, True), ('1', True),
                              ('false', False), (None, False)):
            instance = FakeInstance(
                {'block-storage': 'http://cinder:8776/v3/p'},
                config={'forcedetach_service_token': value})
            self.assertEqual(wanted,
                             plugin.make_client(instance).service_token,
                             value)

    def test_make_compute_client(self):
        instance = FakeInstance({'compute': 'http://nova:8774/v2.1/'})
        client = plugin.make_compute_client(instance)
        self.assertIs(instance.session, client.session)
        self.assertEqual(('http://nova:8774/v2.1', 'compute', '2.89'),
                         (client.endpoint, client.service_type,
                          client.api_version))
        # A cloud without Nova: the audit runs without it.
        self.assertIsNone(plugin.make_compute_client(FakeInstance({})))

    def test_make_client_without_an_endpoint(self):
        err = self.assertRaises(exceptions.CommandError, plugin.make_client,
                                FakeInstance({}))
        self.assertIn('no block-storage', str(err))


class EntryPointsTestCase(testtools.TestCase):

    def test_setup_cfg_declares_the_plugin(self):
        cfg = configparser.ConfigParser()
        cfg.read(os.path.join(REPO_ROOT, 'setup.cfg'))
        entry_points = cfg['entry_points']
        self.assertEqual('forcedetach = cinder_forcedetach.osc.plugin',
                         entry_points['openstack.cli.extension'].strip())
        declared = dict(
            (part.strip() for part in line.split('=', 1))
            for line in entry_points['openstack.%s.v1' % plugin.API_NAME]
            .strip().splitlines())
        self.assertEqual(COMMANDS, declared)

    def test_installed_entry_points_resolve(self):
        """After ``pip install -e .`` an openstack process finds ours."""
        with tempfile.TemporaryDirectory() as elsewhere:
            run = subprocess.run([sys.executable, '-c', LIST_ENTRY_POINTS],
                                 cwd=elsewhere, capture_output=True,
                                 text=True, timeout=60)
        self.assertEqual(0, run.returncode, run.stderr)
        found = json.loads(run.stdout)
        self.assertEqual('cinder_forcedetach.osc.plugin',
                         found['openstack.cli.extension'].get(
                             plugin.API_NAME),
                         'entry points not registered: run pip install -e .')
        self.assertEqual(COMMANDS, found['openstack.forcedetach.v1'])


class OpenstackShellTestCase(fakes.FakeCinderTestCase):
    """``openstack`` itself, against the fake Cinder, auth type none."""

    def openstack(self, *argv, **env_vars):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(('OS_', 'CLIFF_'))}
        env.update(env_vars)
        with tempfile.TemporaryDirectory() as home:
            env['HOME'] = home      # no clouds.yaml of the user
            run = subprocess.run(
                [OPENSTACK, '--os-auth-type', 'none', '--os-endpoint',
                 self.endpoint] + list(argv), cwd=home, env=env,
                capture_output=True, text=True, timeout=120)
        return run.returncode, run.stdout, run.stderr

    def test_force_detach_and_a_missing_volume(self):
        if not os.path.exists(OPENSTACK):
            self.skipTest('python-openstackclient is not installed')
        self.answer_volume('available', [])
        self.answer('POST', '/volumes/%s/action' % fakes.VOL, 202)
        code, out, err = self.openstack('volume', 'force', 'detach',
                                        fakes.VOL, '-f', 'json')
        self.assertEqual(0, code, err)
        self.assertEqual({'volume_id': fakes.VOL, 'status': 'available',
                          'attachments': [], 'result': 'force-detached'},
                         json.loads(out))
        (_m, _p, headers, body), = self.posts()
        self.assertEqual({'os-force_detach': {}}, body)
        self.assertEqual('volume 3.27', headers['OpenStack-API-Version'])
        self.assertNotIn('X-Service-Token', headers)

        # The plugin's global option, from the environment (or clouds.yaml,
        # or --os-forcedetach-service-token), and the volume microversion.
        code, out, err = self.openstack(
            'volume', 'force', 'detach', fakes.VOL, '-f', 'value',
            OS_FORCEDETACH_SERVICE_TOKEN='true', OS_VOLUME_API_VERSION='3.70')
        self.assertEqual(0, code, err)
        headers = self.posts()[-1][2]
        self.assertEqual(headers['X-Auth-Token'], headers['X-Service-Token'])
        self.assertEqual('volume 3.70', headers['OpenStack-API-Version'])

        self.answer('GET', '/volumes?name=nosuch', 200, {'volumes': []})
        code, out, err = self.openstack('volume', 'force', 'detach',
                                        'nosuch')
        self.assertEqual(1, code)
        self.assertEqual('', out)
        self.assertIn('no volume named nosuch', err)
        self.assertNotIn('Traceback', err)
