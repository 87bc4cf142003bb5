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

"""The networking stand-in answers Nova's reads and refuses writes."""

import http.server
import io
import json
import threading
import urllib.error
import urllib.request

import testtools

from cinder_forcedetach.tools import neutron_standin


class StandinTestCase(testtools.TestCase):

    def setUp(self):
        super(StandinTestCase, self).setUp()
        server = http.server.ThreadingHTTPServer(
            ('127.0.0.1', 0), neutron_standin.StandinHandler)
        server.log = io.StringIO()
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        self.url = 'http://127.0.0.1:%d' % server.server_address[1]
        self.server = server

    def call(self, path, method='GET'):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=b'{}' if method == 'POST' else None)
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())

    def test_empty_collections(self):
        self.assertEqual({'ports': []},
                         self.call('/v2.0/ports?device_id=x&fields=id'))
        self.assertEqual({'networks': []}, self.call('/v2.0/networks.json'))
        self.assertEqual({'extensions': []}, self.call('/v2.0/extensions'))

    def test_quotas_unlimited(self):
        quota = self.call('/v2.0/quotas/13732b21f43645c7877eeb48287dd2e0')
        self.assertEqual(-1, quota['quota']['port'])

    def test_default_security_group_per_project(self):
        one = self.call('/v2.0/security-groups?tenant_id=p1&name=default')
        two = self.call('/v2.0/security-groups?tenant_id=p2')
        self.assertEqual(['default'],
                         [g['name'] for g in one['security_groups']])
        self.assertNotEqual(one['security_groups'][0]['id'],
                            two['security_groups'][0]['id'])
        self.assertEqual(one, self.call(
            '/v2.0/security-groups?tenant_id=p1&name=default'))
        self.assertEqual({'security_groups': []}, self.call(
            '/v2.0/security-groups?tenant_id=p1&name=web'))

    def test_writes_and_unknown_paths_are_refused(self):
        err = self.assertRaises(urllib.error.HTTPError, self.call,
                                '/v2.0/ports', 'POST')
        self.assertEqual(501, err.code)
        err = self.assertRaises(urllib.error.HTTPError, self.call,
                                '/v2.0/ports/abc')
        self.assertEqual(404, err.code)
        self.assertIn('POST /v2.0/ports', self.server.log.getvalue())
