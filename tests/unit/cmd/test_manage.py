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

"""cinder-forcedetach's parsing, registry, masking, output and exit codes.

Against a small HTTP server on 127.0.0.1 that answers like Cinder's API
(the functional tests run the same commands against the real API).
"""

import io
import json
import os
import subprocess
import sys

import fixtures
import testtools

from cinder_forcedetach.cmd import api_client
from cinder_forcedetach.cmd import api_commands
from cinder_forcedetach.cmd import errors
from cinder_forcedetach.cmd import manage
from cinder_forcedetach.cmd import registry
from tests.unit.cmd import fake_cinder
from tests.unit.cmd.fake_cinder import ATT
from tests.unit.cmd.fake_cinder import PROJECT
from tests.unit.cmd.fake_cinder import VOL


class ManageTestCase(fake_cinder.FakeCinderTestCase):

    def setUp(self):
        super(ManageTestCase, self).setUp()
        env = {'OS_AUTH_TYPE': 'noauth', 'OS_PROJECT_ID': PROJECT,
               'OS_USER_ID': 'admin',
               'CINDER_ENDPOINT': 'http://127.0.0.1:%d/v3' %
                                  self.httpd.server_address[1],
               'CINDERCLIENT_BYPASS_URL': None,
               'OS_VOLUME_API_VERSION': None}
        for key, value in env.items():
            self.useFixture(fixtures.EnvironmentVariable(key, value))

    def cli(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        code = manage.main(list(argv), stdout=out, stderr=err)
        return code, out.getvalue(), err.getvalue()

    # -- force-detach ------------------------------------------------------

    def test_force_detach_sends_connector_and_attachment(self):
        self.answer('POST', '/volumes/%s/action' % VOL, 202)
        self.answer('GET', '/volumes/%s' % VOL, 200, {'volume': {
            'id': VOL, 'status': 'available', 'attachments': []}})
        code, out, err = self.cli(
            '--format', 'json', 'volume', 'force-detach', VOL,
            '--connector', '{"host": "h1", "initiator": "iqn.x"}',
            '--attachment', ATT)
        self.assertEqual(0, code, err)
        self.assertEqual({'volume_id': VOL, 'status': 'available',
                          'attachments': []}, json.loads(out))
        (_m, path, headers, body), = self.posts()
        self.assertEqual({'os-force_detach': {
            'connector': {'host': 'h1', 'initiator': 'iqn.x'},
            'attachment_id': ATT}}, body)
        self.assertEqual('admin:%s' % PROJECT, headers['X-Auth-Token'])
        self.assertEqual('volume 3.27', headers['OpenStack-API-Version'])
        self.assertNotIn('X-Service-Roles', headers)

    def test_force_detach_service_token_noauth(self):
        self.answer('POST', '/volumes/%s/action' % VOL, 202)
        self.answer('GET', '/volumes/%s' % VOL, 200, {'volume': {
            'id': VOL, 'status': 'available', 'attachments': []}})
        code, out, err = self.cli('volume', 'force-detach', VOL,
                                  '--service-token', '--format', 'table')
        self.assertEqual(0, code, err)
        self.assertIn('| status      | available', out)
        (_m, _p, headers, body), = self.posts()
        self.assertEqual({'os-force_detach': {}}, body)
        self.assertEqual('service', headers['X-Service-Roles'])

    def test_force_detach_refuses_all_hosts_on_multiattach(self):
        self.answer('GET', '/volumes/%s' % VOL, 200, {'volume': {
            'id': VOL, 'status': 'in-use',
            'attachments': [{'attachment_id': 'a'},
                            {'attachment_id': 'b'}]}})
        code, _out, err = self.cli('volume', 'force-detach', VOL)
        self.assertEqual(errors.EXIT_USAGE, code)
        self.assertIn('--all-hosts', err)
        self.assertEqual([], self.posts())

    def test_all_hosts_of_several_deletes_each_attachment(self):
        """Cinder refuses an os-force_detach naming no host of several."""
        self.answer('GET', '/volumes/%s' % VOL, 200, {'volume': {
            'id': VOL, 'status': 'in-use',
            'attachments': [{'attachment_id': 'a'},
                            {'attachment_id': 'b'}]}})
        self.answer('DELETE', '/attachments/a', 200, {})
        self.answer('DELETE', '/attachments/b', 404,
                    {'itemNotFound': {'message': 'gone'}})   # a re-run
        code, out, err = self.cli('--format', 'json', 'volume',
                                  'force-detach', VOL, '--all-hosts')
        self.assertEqual(0, code, err)
        self.assertEqual([('DELETE', '/v3/%s/attachments/a' % PROJECT),
                          ('DELETE', '/v3/%s/attachments/b' % PROJECT)],
                         [s[:2] for s in self.httpd.seen
                          if s[0] == 'DELETE'])
        self.assertEqual([], self.posts())
        self.assertIn('one attachment delete each',
                      json.loads(out)['result'])

    SEVERAL = {'volume': {'id': VOL, 'status': 'in-use', 'attachments': [
        {'attachment_id': 'a', 'host_name': 'h1'},
        {'attachment_id': 'b', 'host_name': 'h2'}]}}

    def deletes(self):
        return [s[1] for s in self.httpd.seen if s[0] == 'DELETE']

    def test_one_host_of_several_is_an_attachment_delete(self):
        """Cinder 409s an os-force_detach of a volume with several."""
        self.answer('GET', '/volumes/%s' % VOL, 200, self.SEVERAL)
        self.answer('DELETE', '/attachments/b', 200, {})
        for extra in (['--connector', '{"host": "h2"}'],
                      ['--attachment', 'b'],
                      ['--attachment', 'b', '--connector', '{"host": "h2"}']):
            self.httpd.seen[:] = []
            code, out, err = self.cli('--format', 'json', 'volume',
                                      'force-detach', VOL, *extra)
            self.assertEqual(0, code, err)
            self.assertEqual(['/v3/%s/attachments/b' % PROJECT],
                             self.deletes(), extra)
            self.assertEqual([], self.posts())
            self.assertIn('attachment delete of b', json.loads(out)['result'])

    def test_an_attachment_of_another_volume_is_not_deleted(self):
        self.answer('GET', '/volumes/%s' % VOL, 200, self.SEVERAL)
        code, out, err = self.cli('--format', 'json', 'volume',
                                  'force-detach', VOL, '--attachment', ATT)
        self.assertEqual(0, code, err)
        self.assertEqual([], self.deletes())
        self.assertEqual([], self.posts())
        self.assertTrue(json.loads(out)['result'].startswith(
            'already detached'))

    def test_a_host_without_an_attachment_among_several(self):
        self.answer('GET', '/volumes/%s' % VOL, 200, self.SEVERAL)
        code, _out, err = self.cli('volume', 'force-detach', VOL,
                                   '--connector', '{"host": "h9"}')
        self.assertEqual(errors.EXIT_NOT_FOUND, code)
        self.assertIn('no attachment of host h9', err)
        self.assertEqual(([], []), (self.deletes(), self.posts()))

    def test_a_service_names_one_host_of_several_to_force_detach(self):
        """Cinder's guard lets a service through: the driver revokes."""
        self.answer('GET', '/volumes/%s' % VOL, 200, self.SEVERAL)
        self.answer('POST', '/volumes/%s/action' % VOL, 202)
        code, _out, err = self.cli('volume', 'force-detach', VOL,
                                   '--service-token',
                                   '--connector', '{"host": "h2"}')
        self.assertEqual(0, code, err)
        (_m, _p, _h, body), = self.posts()
        self.assertEqual({'os-force_detach': {'connector': {'host': 'h2'}}},
                         body)
        self.assertEqual([], self.deletes())

    def test_rerun_of_a_finished_force_detach_is_a_success(self):
        """Cinder answers 409 to a volume it already detached."""
        self.answer('POST', '/volumes/%s/action' % VOL, 409,
                    {'conflict': {'message': 'Detach volume from instance '
                                             'using the Compute API'}})
        self.answer('GET', '/volumes/%s' % VOL, 200, {'volume': {
            'id': VOL, 'status': 'available', 'attachments': []}})
        for extra in ([], ['--attachment', ATT]):
            code, out, err = self.cli('--format', 'json', 'volume',
                                      'force-detach', VOL, *extra)
            self.assertEqual(0, code, err)
            result = json.loads(out)
            self.assertTrue(result['result'].startswith('already detached'),
                            result)
            self.assertEqual('available', result['status'])

    def test_conflict_on_a_volume_still_attached_stays_a_conflict(self):
        self.answer('POST', '/volumes/%s/action' % VOL, 409,
                    {'conflict': {'message': 'Detach volume from instance '
                                             'using the Compute API'}})
        self.answer('GET', '/volumes/%s' % VOL, 200, {'volume': {
            'id': VOL, 'status': 'in-use',
            'attachments': [{'attachment_id': ATT}]}})
        code, _out, err = self.cli('volume', 'force-detach', VOL,
                                   '--attachment', ATT)
        self.assertEqual(errors.EXIT_CONFLICT, code)
        self.assertIn('Compute API', err)

    def test_bad_connector_sends_nothing(self):
        for bad in ('{"host": ', '[1, 2]', '@/nonexistent/connector.json'):
            code, _out, err = self.cli('volume', 'force-detach', VOL,
                                       '--connector', bad)
            self.assertEqual(errors.EXIT_USAGE, code, bad)
            self.assertIn('error', err)
        self.assertEqual([], self.httpd.seen)

    def test_connector_from_file(self):
        path = os.path.join(self.useFixture(fixtures.TempDir()).path, 'c')
        with open(path, 'w') as f:
            json.dump({'host': 'h2'}, f)
        self.assertEqual({'host': 'h2'},
                         api_commands.load_connector('@' + path))

    def test_http_errors_map_to_exit_codes(self):
        cases = [(404, errors.EXIT_NOT_FOUND),
                 (409, errors.EXIT_CONFLICT),
                 (500, errors.EXIT_BACKEND),
                 (403, errors.EXIT_USAGE)]
        self.answer('GET', '/volumes/%s' % VOL, 200, {'volume': {
            'id': VOL, 'status': 'in-use', 'attachments': []}})
        for status, expected in cases:
            self.answer('POST', '/volumes/%s/action' % VOL, status,
                        {'err': {'message': 'status %d' % status}})
            code, _out, err = self.cli('volume', 'force-detach', VOL,
                                       '--all-hosts')
            self.assertEqual(expected, code, err)
            self.assertIn('status %d' % status, err)
        self.assertEqual(errors.EXIT_CONFLICT, api_client.exit_code_for(
            400, 'Invalid volume: Volume status must be in-use'))
        self.assertEqual(errors.EXIT_USAGE, api_client.exit_code_for(
            400, 'Invalid input received'))

    def test_unreachable(self):
        self.useFixture(fixtures.EnvironmentVariable(
            'CINDER_ENDPOINT', 'http://127.0.0.1:9/v3'))
        code, _out, err = self.cli('volume', 'force-detach', VOL,
                                   '--all-hosts')
        self.assertEqual(errors.EXIT_UNREACHABLE, code)
        self.assertIn('cannot reach', err)

    def test_usage_errors(self):
        self.assertEqual(errors.EXIT_USAGE, self.cli()[0])
        self.assertEqual(errors.EXIT_USAGE,
                         self.cli('volume', 'force-detach')[0])
        self.assertEqual(errors.EXIT_USAGE, self.cli('volume', 'nope')[0])
        self.useFixture(fixtures.EnvironmentVariable('OS_AUTH_TYPE', None))
        code, _out, err = self.cli('volume', 'force-detach', VOL)
        self.assertEqual(errors.EXIT_USAGE, code)
        self.assertIn('OS_AUTH_TYPE', err)

    def test_noauth_endpoint_forms(self):
        self.assertEqual(('http://h:1/v3/%s' % PROJECT, PROJECT),
                         api_client._noauth_endpoint('http://h:1/v3', PROJECT))
        self.assertEqual(('http://h:1/v3/%s' % PROJECT, PROJECT),
                         api_client._noauth_endpoint(
                             'http://h:1/v3/%s/' % PROJECT, None))
        self.assertRaises(errors.CliError, api_client._noauth_endpoint,
                          'http://h:1/v3/%s' % PROJECT, 'b' * 32)
        self.assertRaises(errors.CliError, api_client._noauth_endpoint,
                          'http://h:1/v3', None)

    # -- attachment show ---------------------------------------------------

    def _attachment(self):
        return {'id': ATT, 'status': 'attached', 'connection_info': {
            'driver_volume_type': 'iscsi', 'auth_method': 'CHAP',
            'auth_username': 'user1', 'auth_password': 's3cret-chap',
            'target_iqn': 'iqn.2010-10.org.openstack:volume-1',
            'keyring': 'AQD-ceph-key', 'secret_uuid': 'not-a-secret',
            'nested': [{'token': 'tok-123'}]}}

    def test_attachment_show_masks(self):
        self.answer('GET', '/attachments/%s' % ATT, 200,
                    {'attachment': self._attachment()})
        code, out, err = self.cli('attachment', 'show', ATT)
        self.assertEqual(0, code, err)
        for secret in ('s3cret-chap', 'AQD-ceph-key', 'tok-123'):
            self.assertNotIn(secret, out)
        self.assertIn('connection_info.auth_password', out)
        self.assertIn('user1', out)
        self.assertIn('iqn.2010-10.org.openstack:volume-1', out)
        code, out, err = self.cli('attachment', 'show', ATT, '--format',
                                  'json')
        shown = json.loads(out)['connection_info']
        self.assertEqual('***', shown['auth_password'])
        self.assertEqual('***', shown['keyring'])
        self.assertEqual('***', shown['nested'][0]['token'])

    def test_attachment_show_secrets_on_request(self):
        self.answer('GET', '/attachments/%s' % ATT, 200,
                    {'attachment': self._attachment()})
        code, out, err = self.cli('--format', 'json', 'attachment', 'show',
                                  ATT, '--show-secrets')
        self.assertEqual(0, code, err)
        self.assertEqual(self._attachment(), json.loads(out))

    def test_attachment_show_not_found(self):
        code, _out, err = self.cli('attachment', 'show', ATT)
        self.assertEqual(errors.EXIT_NOT_FOUND, code)
        self.assertIn('404', err)

    # -- local commands: same registry, run through local.run -------------

    def test_attachment_refresh_runs_locally(self):
        seen = []

        def fake_run(cmd, args, out, stderr):
            seen.append((cmd.func, args.attachment, args.config_file,
                         out.fmt))
            out.stream.write('refreshed\n')
            return 0
        self.useFixture(fixtures.MonkeyPatch(
            'cinder_forcedetach.cmd.local.run', fake_run))
        code, out, _err = self.cli('--format', 'json', 'attachment',
                                   'refresh', ATT, '--config-file',
                                   '/etc/x.conf')
        self.assertEqual(0, code)
        self.assertEqual('refreshed\n', out)
        self.assertEqual([(registry.COMMANDS['attachment']['refresh'].func,
                           ATT, ['/etc/x.conf'], 'json')], seen)
        self.assertEqual([], self.httpd.seen)

    def test_one_registry(self):
        commands = {(c, n): cmd for c in registry.COMMANDS
                    for n, cmd in registry.COMMANDS[c].items()}
        self.assertEqual({('volume', 'force-detach'), ('attachment', 'show'),
                          ('attachment', 'refresh'), ('fence', 'list'),
                          ('fence', 'lift'), ('audit', None),
                          ('host', 'fence')}, set(commands))
        self.assertEqual({('attachment', 'refresh'), ('fence', 'list'),
                          ('fence', 'lift'), ('audit', None),
                          ('host', 'fence')},
                         {k for k, cmd in commands.items() if cmd.local})
        # The local ones get cinder.conf's options, the API ones do not.
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', io.StringIO()))
        parser = manage.build_parser()
        args = parser.parse_args(['fence', 'list', '--config-dir', '/d'])
        self.assertEqual('/d', args.config_dir)
        self.assertRaises(SystemExit, parser.parse_args,
                          ['attachment', 'show', ATT, '--config-dir', '/d'])

    def test_value_format(self):
        self.answer('GET', '/attachments/%s' % ATT, 200,
                    {'attachment': {'id': ATT, 'status': 'attached'}})
        code, out, err = self.cli('attachment', 'show', ATT, '--format',
                                  'value')
        self.assertEqual(0, code, err)
        self.assertEqual('%s\nattached\n' % ATT, out)


class StartTestCase(testtools.TestCase):

    def test_the_cli_loads_without_cinders_engine(self):
        """``--help`` and the API commands start without Cinder's context.

        Cinder's context, RPC and the force-detach flow are the audit's and
        the host fence's, imported when they run: loading them cost every
        command (``--help`` included) about 3 s of its 4.
        """
        code = ('import sys; import cinder_forcedetach.cmd.manage; '
                'print(sorted(m for m in ("cinder.context", "cinder.rpc", '
                '"cinder_forcedetach.flows.force_detach") '
                'if m in sys.modules))')
        res = subprocess.run([sys.executable, '-c', code],
                             capture_output=True, text=True, check=True)
        self.assertEqual('[]', res.stdout.strip(), res.stderr[-2000:])
