"""What the refresh command masks, and the RBD options listed."""

import io
import json
import sys

import fixtures
import testtools

from cinder_forcedetach.cmd import local
from cinder_forcedetach.cmd import refresh


class RefreshOutputTestCase(testtools.TestCase):

    def test_secrets_masked(self):
        info = {'auth_password': 'chap', 'auth_username': 'u',
                'keyring': 'AQ==', 'secret_uuid': 'uuid', 'key': 'k',
                'nested': [{'discovery_auth_password': 'p'}],
                'hosts': ['127.0.0.2'], 'secret_type': 'ceph'}
        masked = local.mask_secrets(info)
        self.assertEqual('***', masked['auth_password'])
        self.assertEqual('***', masked['keyring'])
        self.assertEqual('***', masked['key'])
        self.assertEqual('***', masked['nested'][0]['discovery_auth_password'])
        for keep in ('auth_username', 'secret_uuid', 'hosts', 'secret_type'):
            self.assertEqual(info[keep], masked[keep])
        out = io.StringIO()
        local.emit({'connection_info': masked}, 'table', out)
        self.assertNotIn('chap', out.getvalue())
        self.assertIn('connection_info.hosts', out.getvalue())
        out = io.StringIO()
        local.emit({'connection_info': masked}, 'json', out)
        self.assertEqual(masked, json.loads(out.getvalue())[
            'connection_info'])

    def test_usage_error(self):
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', io.StringIO()))
        self.assertEqual(local.EXIT_USAGE, refresh.main_refresh([]))
        self.assertIn('ATTACHMENT_ID', sys.stderr.getvalue())

    def test_options_listed(self):
        from cinder_forcedetach import opts
        names = {o.dest for o in opts.list_opts()[0][1]}
        self.assertIn('forcedetach_rbd_blocklist_expire_seconds', names)
