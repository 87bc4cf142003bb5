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

"""A small HTTP server on 127.0.0.1 that answers like Cinder's v3 API.

The CLI's tests (:mod:`tests.unit.cmd.test_manage`) and the
OpenStackClient plugin's (:mod:`tests.unit.osc`) run their commands
against it; the functional tests run the same commands against the real
API.
"""

import http.server
import json
import threading

import testtools

PROJECT = 'a' * 32
VOL = '11111111-2222-3333-4444-555555555555'
ATT = '66666666-7777-8888-9999-000000000000'


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, fmt, *args):
        pass

    def _reply(self, status, body=None):
        data = json.dumps(body).encode() if body is not None else b''
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.server.seen.append(('GET', self.path, dict(self.headers), None))
        status, body = self.server.answers.get(('GET', self.path),
                                               (404, {'itemNotFound': {
                                                   'message': 'no'}}))
        self._reply(status, body)

    def do_POST(self):
        length = int(self.headers.get('Content-Length') or 0)
        body = json.loads(self.rfile.read(length) or b'null')
        self.server.seen.append(('POST', self.path, dict(self.headers),
                                 body))
        status, answer = self.server.answers.get(('POST', self.path),
                                                 (404, None))
        self._reply(status, answer)

    def do_DELETE(self):
        self.server.seen.append(('DELETE', self.path, dict(self.headers),
                                 None))
        status, answer = self.server.answers.get(('DELETE', self.path),
                                                 (404, None))
        self._reply(status, answer)


class FakeCinderTestCase(testtools.TestCase):
    """A fake Cinder v3 API on 127.0.0.1 (noauth, project PROJECT).

    ``answer()`` sets what a call answers; ``httpd.seen`` lists the calls.
    """

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

    def posts(self):
        return [s for s in self.httpd.seen if s[0] == 'POST']
