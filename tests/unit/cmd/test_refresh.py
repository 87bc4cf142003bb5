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

"""``cinder-forcedetach attachment refresh``: its arguments and its output."""

import io

import fixtures
import testtools

from cinder_forcedetach.cmd import errors
from cinder_forcedetach.cmd import manage
from cinder_forcedetach.cmd import output


class RefreshTestCase(testtools.TestCase):

    def test_usage_error(self):
        err = io.StringIO()
        # argparse writes its usage errors to sys.stderr itself.
        self.useFixture(fixtures.MonkeyPatch('sys.stderr', err))
        self.assertEqual(errors.EXIT_USAGE,
                         manage.main(['attachment', 'refresh'],
                                     io.StringIO(), err))
        self.assertIn('ATTACHMENT_ID', err.getvalue())

    def test_connection_info_secrets_never_printed(self):
        info = {'auth_password': 'chap', 'auth_username': 'u',
                'keyring': 'AQ==', 'hosts': ['127.0.0.2'],
                'nested': [{'discovery_auth_password': 'p'}]}
        for fmt in ('table', 'json', 'value'):
            out = io.StringIO()
            output.Output(fmt, out).emit(
                {'connection_info': output.mask_secrets(info)})
            for secret in ('chap', 'AQ==', "'p'"):
                self.assertNotIn(secret, out.getvalue(), fmt)
            self.assertIn('127.0.0.2', out.getvalue(), fmt)
