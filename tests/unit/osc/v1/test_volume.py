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

"""``openstack volume force detach``, ``openstack volume attachment
connection show`` and ``openstack volume audit``: their parsers, what they
send, what they print.

Run as cliff runs them (parser, ``run``, formatter) with the plugin's
client on a fake Cinder API.
"""

import json

from osc_lib import exceptions

from cinder_forcedetach.osc.v1 import volume
from tests.unit.osc import fakes
from tests.unit.osc.fakes import ATT
from tests.unit.osc.fakes import VOL


def _attachment():
    return {'id': ATT, 'status': 'attached', 'instance': None,
            'volume_id': VOL, 'attach_mode': 'rw',
            # Flat, as Cinder's attachments API shows it.
            'connection_info': {
                'driver_volume_type': 'iscsi', 'auth_method': 'CHAP',
                'auth_username': 'user1', 'auth_password': 's3cret-chap',
                'target_iqn': 'iqn.2010-10.org.openstack:volume-1',
                'keyring': 'AQD-ceph-key', 'secret_uuid': 'libvirt-uuid',
                'nested': [{'token': 'tok-123'}],
                'auth': {'secret': 'nested-secret', 'user': 'u'}}}


class CommandTestCase(fakes.FakeCinderTestCase):

    command_class = volume.ForceDetachVolume
    prog = 'openstack volume force detach'

    def run_command(self, argv, service_token=False):
        """(exit status, stdout) of the command; errors raise."""
        self.app = fakes.FakeApp(self.client(service_token))
        cmd = self.command_class(self.app, None)
        parsed = cmd.get_parser(self.prog).parse_args(argv)
        return cmd.run(parsed), self.app.stdout.getvalue()

    def options(self):
        parser = self.command_class(fakes.FakeApp(None), None).get_parser(
            self.prog)
        return {a.dest: a.option_strings for a in parser._actions}


class ForceDetachVolumeTestCase(CommandTestCase):

    def test_parser(self):
        options = self.options()
        self.assertEqual([], options['volume'])
        for dest in ('attachment', 'connector', 'all_hosts',
                     'service_token'):
            self.assertEqual(['--' + dest.replace('_', '-')], options[dest])
        self.assertIn('-f', options['formatter'])

    def test_one_host_json(self):
        self.answer('POST', '/volumes/%s/action' % VOL, 202)
        self.answer_volume('in-use', ['other'])
        code, out = self.run_command([
            VOL, '--attachment', ATT, '--connector',
            '{"host": "h1", "initiator": "iqn.x"}', '-f', 'json'])
        self.assertEqual(0, code)
        self.assertEqual({'volume_id': VOL, 'status': 'in-use',
                          'attachments': ['other'],
                          'result': 'force-detached'}, json.loads(out))
        (_m, _p, headers, body), = self.posts()
        self.assertEqual({'os-force_detach': {
            'connector': {'host': 'h1', 'initiator': 'iqn.x'},
            'attachment_id': ATT}}, body)
        self.assertNotIn('X-Service-Token', headers)

    def test_service_token(self):
        self.answer('POST', '/volumes/%s/action' % VOL, 202)
        self.answer_volume('available', [])
        code, out = self.run_command([VOL, '--service-token', '-f',
                                      'value'])
        self.assertEqual(0, code)
        (_m, _p, headers, _b), = self.posts()
        # The user's own token (noauth's here), sent as a service token.
        self.assertEqual(headers['X-Auth-Token'],
                         headers['X-Service-Token'])
        # The client OpenStackClient caches keeps sending none.
        self.assertFalse(self.app.client_manager.forcedetach.service_token)

    def test_table(self):
        self.answer('POST', '/volumes/%s/action' % VOL, 202)
        self.answer_volume('available', [])
        code, out = self.run_command([VOL, '--attachment', ATT,
                                      '--connector', '{"host": "h1"}'])
        self.assertEqual(0, code)
        self.assertRegex(out, r'\| status +\| available +\|')
        self.assertRegex(out, r'\| volume_id +\| %s \|' % VOL)

    def test_all_hosts_guard_and_each_attachment(self):
        self.answer_volume('in-use', ['a', 'b'])
        err = self.assertRaises(exceptions.CommandError, self.run_command,
                                [VOL])
        self.assertIn('--all-hosts', str(err))
        self.assertEqual([], self.posts())
        self.answer('DELETE', '/attachments/a', 200, {})
        self.answer('DELETE', '/attachments/b', 200, {})
        code, out = self.run_command([VOL, '--all-hosts', '-f', 'json'])
        self.assertIn('one attachment delete each', json.loads(out)['result'])

    def test_errors_are_command_errors(self):
        self.answer('GET', '/volumes?name=nosuch', 200, {'volumes': []})
        err = self.assertRaises(exceptions.CommandError, self.run_command,
                                ['nosuch'])
        self.assertEqual('no volume named nosuch', str(err))
        self.answer_volume('in-use', [ATT])
        self.answer('POST', '/volumes/%s/action' % VOL, 409,
                    {'conflict': {'message': 'only a service may'}})
        err = self.assertRaises(exceptions.CommandError, self.run_command,
                                [VOL, '--attachment', ATT])
        self.assertIn('HTTP 409: only a service may', str(err))
        err = self.assertRaises(exceptions.CommandError, self.run_command,
                                [VOL, '--connector', '[1]'])
        self.assertIn('a connector is a JSON object', str(err))
        self.assertEqual(1, len(self.posts()))


class ShowVolumeAttachmentConnectionTestCase(CommandTestCase):

    command_class = volume.ShowVolumeAttachmentConnection
    prog = 'openstack volume attachment connection show'

    def test_parser(self):
        options = self.options()
        self.assertEqual([], options['attachment'])
        self.assertEqual(['--show-secrets'], options['show_secrets'])

    def test_secrets_masked(self):
        self.answer('GET', '/attachments/%s' % ATT, 200,
                    {'attachment': _attachment()})
        for fmt in ('table', 'json', 'value', 'yaml', 'shell'):
            code, out = self.run_command([ATT, '-f', fmt])
            self.assertEqual(0, code)
            for secret in ('s3cret-chap', 'AQD-ceph-key', 'tok-123',
                           'nested-secret'):
                self.assertNotIn(secret, out, fmt)
            self.assertIn('iqn.2010-10.org.openstack:volume-1', out, fmt)
            self.assertIn('libvirt-uuid', out, fmt)
        code, out = self.run_command([ATT, '-f', 'json'])
        shown = json.loads(out)
        data = shown['connection_info']
        self.assertEqual('***', data['auth_password'])
        self.assertEqual('***', data['keyring'])
        self.assertEqual('***', data['nested'][0]['token'])
        self.assertEqual('user1', data['auth_username'])
        self.assertEqual('***', data['auth']['secret'])
        self.assertEqual(VOL, shown['volume_id'])
        self.assertEqual(ATT, shown['id'])
        code, out = self.run_command([ATT])
        self.assertIn("auth_password='***'", out)
        self.assertIn("auth.secret='***'", out)

    def test_show_secrets(self):
        self.answer('GET', '/attachments/%s' % ATT, 200,
                    {'attachment': _attachment()})
        code, out = self.run_command([ATT, '--show-secrets', '-f', 'json'])
        self.assertEqual(_attachment()['connection_info'],
                         json.loads(out)['connection_info'])

    def test_not_found(self):
        err = self.assertRaises(exceptions.CommandError, self.run_command,
                                [ATT])
        self.assertIn('HTTP 404', str(err))


STUCK, LOST, HELD = (VOL, '22222222-2222-3333-4444-555555555555',
                     '33333333-2222-3333-4444-555555555555')
OLD = '2026-11-27T10:00:00.000000'


class AuditVolumesTestCase(CommandTestCase):
    """Three volumes the API shows, with Nova not read.

    Stuck in detaching with a host's attachment; in-use with none; an
    instance's attachment stuck in attaching.
    """

    command_class = volume.AuditVolumes
    prog = 'openstack volume audit'

    def setUp(self):
        super(AuditVolumesTestCase, self).setUp()

        def vol(vid, status, attachments=()):
            return {'id': vid, 'name': None, 'status': status,
                    'updated_at': OLD,
                    'os-vol-host-attr:host': 'node1@tgt#tgt',
                    'attachments': [{'attachment_id': a, 'host_name': 'h1'}
                                    for a in attachments]}
        self.answer('GET', '/volumes/detail?all_tenants=1&limit=1000', 200,
                    {'volumes': [vol(STUCK, 'detaching', [ATT]),
                                 vol(LOST, 'in-use'),
                                 vol(HELD, 'attaching', ['a-held'])]})
        self.answer('GET', '/attachments?all_tenants=1&limit=1000', 200,
                    {'attachments': [
                        {'id': ATT, 'volume_id': STUCK, 'status': 'attached',
                         'instance': None},
                        {'id': 'a-held', 'volume_id': HELD,
                         'status': 'attaching', 'instance': 'i1'}]})
        for vid, attached in ((STUCK, [ATT]), (LOST, [])):
            self.answer('GET', '/volumes/%s' % vid, 200, {'volume': {
                'id': vid, 'status': 'in-use', 'attachments': [
                    {'attachment_id': a} for a in attached]}})

    def rows(self, argv):
        code, out = self.run_command(argv + ['--no-nova', '-f', 'json'])
        return code, {r['volume']: (r['case'], r['result'])
                      for r in json.loads(out)}

    def test_parser(self):
        options = self.options()
        for dest in ('fix', 'case', 'fix_limit', 'grace', 'no_nova'):
            self.assertEqual(['--' + dest.replace('_', '-')], options[dest])

    def test_found_and_nothing_sent(self):
        code, rows = self.rows([])
        self.assertEqual(0, code)
        self.assertEqual({STUCK: ('stuck_transition', 'found'),
                          LOST: ('in_use_without_attachment', 'found'),
                          HELD: ('stuck_transition', 'found')}, rows)
        self.assertEqual([], self.posts())
        # Changed within the grace period: not judged.
        code, rows = self.rows(['--grace', '1e10'])
        self.assertEqual({}, rows)

    def test_fix_repairs_by_force_detach_and_refuses_an_instance(self):
        self.answer('POST', '/volumes/%s/action' % STUCK, 202)
        self.answer('POST', '/volumes/%s/action' % LOST, 500,
                    {'computeFault': {'message': 'tgtd down'}})
        code, rows = self.rows(['--fix'])
        # A failed repair: the table, then exit status 1.
        self.assertEqual(1, code)
        self.assertEqual('repaired', rows[STUCK][1])
        self.assertIn('tgtd down', rows[LOST][1])
        self.assertIn('refused: Nova was not consulted', rows[HELD][1])
        self.assertEqual(
            {self.base + '/volumes/%s/action' % STUCK: {
                'os-force_detach': {}},
             self.base + '/volumes/%s/action' % LOST: {
                'os-force_detach': {}}},
            {path: body for _m, path, _h, body in self.posts()})

    def test_fix_only_a_case_within_a_limit(self):
        self.answer('POST', '/volumes/%s/action' % STUCK, 202)
        code, rows = self.rows(['--fix', '--case', 'stuck_transition',
                                '--fix-limit', '0'])
        self.assertEqual(0, code)
        self.assertEqual('not selected', rows[LOST][1])
        self.assertEqual('over the fix limit (0)', rows[STUCK][1])
        self.assertEqual([], self.posts())
