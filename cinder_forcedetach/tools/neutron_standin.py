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

"""A networking **stand-in** for the box's Nova (not Neutron).

Nova asks Neutron about a server's ports even when it has none (boot with
``--nic none``, shelve, unshelve, rebuild, delete).  Real
``neutron-server`` needs a database, a plugin and agents this box does
not run; this answers what Nova asks with empty collections, and a
``default`` security group per project, and refuses every write (so a
request that would need a real network fails loudly instead of passing).
Each request is logged.  Standard library only.
"""

import argparse
import http.server
import json
import re
import sys
import urllib.parse
import uuid

#: Nova's reads that the stand-in answers with an empty collection.
COLLECTIONS = ('networks', 'subnets', 'ports', 'floatingips', 'routers',
               'trunks', 'qos/policies', 'segments', 'extensions',
               'network-ip-availabilities')
_PATH_RE = re.compile(r'^/v2\.0/(?P<what>[A-Za-z0-9/_-]+?)(?:\.json)?$')
_GROUP_NS = uuid.UUID('3a7e7a52-0d4c-4b53-9a3e-6f1b0f2a3c11')


def default_group(project_id):
    """The ``default`` security group of *project_id* (a stable id)."""
    return {'id': str(uuid.uuid5(_GROUP_NS, project_id or '-')),
            'name': 'default', 'description': 'default',
            'tenant_id': project_id, 'project_id': project_id,
            'security_group_rules': [], 'stateful': True, 'tags': []}


class StandinHandler(http.server.BaseHTTPRequestHandler):
    server_version = 'neutron-standin/1'

    def log_message(self, fmt, *args):
        self.server.log.write('%s %s\n' % (self.log_date_time_string(),
                                           fmt % args))
        self.server.log.flush()

    def _send(self, status, body=None):
        data = json.dumps(body).encode() if body is not None else b''
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path in ('/', ''):
            self._send(200, {'versions': [{'id': 'v2.0', 'status': 'CURRENT',
                                           'links': []}]})
            return
        match = _PATH_RE.match(url.path)
        what = match and match.group('what')
        if what == 'security-groups':
            query = urllib.parse.parse_qs(url.query)
            project = (query.get('tenant_id') or query.get('project_id') or
                       [self.headers.get('X-Project-Id', '')])[0]
            group = default_group(project)
            wanted = query.get('name') or query.get('id')
            found = [group] if not wanted or group['name'] in wanted or \
                group['id'] in wanted else []
            self._send(200, {'security_groups': found})
        elif what and what.startswith('quotas/'):
            self._send(200, {'quota': {'port': -1, 'network': -1,
                                       'security_group': -1}})
        elif what in COLLECTIONS:
            self._send(200, {what.split('/')[-1].replace('-', '_'): []})
        else:
            self._send(404, {'NeutronError': {
                'type': 'NotFound', 'detail': '',
                'message': 'the box networking stand-in has no %s' %
                           url.path}})

    def _refuse(self):
        self._send(501, {'NeutronError': {
            'type': 'NotImplemented', 'detail': '',
            'message': 'the box networking stand-in makes no networks '
                       'or ports: boot with --nic none'}})

    do_POST = do_PUT = do_DELETE = _refuse


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, required=True)
    parser.add_argument('--log-file', required=True)
    args = parser.parse_args(argv)
    server = http.server.ThreadingHTTPServer((args.host, args.port),
                                             StandinHandler)
    with open(args.log_file, 'a') as log:
        server.log = log
        server.serve_forever()


if __name__ == '__main__':
    sys.exit(main())
