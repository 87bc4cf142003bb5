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

"""A fake Cinder API (the one of :mod:`tests.unit.cmd.test_manage`) and an
OpenStackClient application around a plugin client."""

import http.server
import io
import threading

from fixtures import EnvironmentVariable  # noqa: F401 (for the tests)
from keystoneauth1 import session as ks_session
import testtools

from cinder_forcedetach.cmd import api_client
from tests.unit.cmd.test_manage import _Handler

PROJECT = 'a' * 32
VOL = '11111111-2222-3333-4444-555555555555'
ATT = '66666666-7777-8888-9999-000000000000'


class FakeClientManager(object):
    def __init__(self, client):
        self.forcedetach = client


class FakeApp(object):
    """What a cliff command uses of OpenStackClient's application."""

    def __init__(self, client):
        self.client_manager = FakeClientManager(client)
        self.stdout = io.StringIO()
        self.stderr = io.StringIO()
        self.stdin = io.StringIO()
        self.options = None


class FakeCinderTestCase(testtools.TestCase):
    """A fake Cinder v3 API on 127.0.0.1 (noauth, project PROJECT)."""

    def setUp(self):
        super(FakeCinderTestCase, self).setUp()
        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0),
                                                     _Handler)
        self.httpd.daemon_threads = True
        self.httpd.answers = {}
        self.httpd.seen = []
        threading.Thread(target=self.httpd.serve_forever,
                         kwargs={'poll_interval': 0.02}, daemon=True).start()
        self.addCleanup(self.httpd.server_close)
        self.addCleanup(self.httpd.shutdown)
        self.base = '/v3/%s' % PROJECT
        self.endpoint = 'http://127.0.0.1:%d%s' % (
            self.httpd.server_address[1], self.base)

    def answer(self, method, path, status, body=None):
        self.httpd.answers[(method, self.base + path)] = (status, body)

    def answer_volume(self, status, attachment_ids):
        self.answer('GET', '/volumes/%s' % VOL, 200, {'volume': {
            'id': VOL, 'status': status,
            'attachments': [{'attachment_id': a} for a in attachment_ids]}})

    def posts(self):
        return [s for s in self.httpd.seen if s[0] == 'POST']

    def client(self, service_token=False):
        """The plugin's client, as make_client builds it, on noauth."""
        auth = api_client.NoAuthPlugin('admin', PROJECT, self.endpoint)
        return api_client.Client(ks_session.Session(auth=auth),
                                 self.endpoint, service_token=service_token)
