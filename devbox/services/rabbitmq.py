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

"""RabbitMQ (and its Erlang port mapper), the box's message broker.

``epmd`` and ``rabbitmq-server`` with their own node name, ports, mnesia
and log directories under ``STATE/rabbitmq``, loopback only, a ``cinder``
user whose random password is kept in ``STATE/secrets.json``.
"""

import errno
import hashlib
import os
import shutil
import socket
import subprocess

from devbox import boxutil
from devbox.services import base

RABBITMQ_SERVER = '/usr/lib/rabbitmq/bin/rabbitmq-server'


def amqp_ready(host, port):
    """The broker answers the AMQP 0-9-1 header with Connection.Start."""
    try:
        with socket.create_connection((host, port), timeout=2) as s:
            s.sendall(b'AMQP\x00\x00\x09\x01')
            head = s.recv(11)
    except OSError as err:
        if err.errno not in (errno.ECONNREFUSED, errno.ECONNRESET, None):
            boxutil.log('amqp probe: %s' % err)
        return False
    # frame type 1 (method), channel 0, class 10 method 10.
    return len(head) == 11 and head[0] == 1 and head[7:11] == \
        b'\x00\x0a\x00\x0a'


class RabbitMQ(base.Service):

    name = 'rabbitmq'
    secret_keys = ('rabbit_password',)

    def processes(self, info):
        return ['epmd', 'rabbitmq']

    def ports(self, info):
        return {'epmd': [info['epmd_port']],
                'rabbitmq': [info['rabbit_port'], info['rabbit_port'] + 1]}

    @staticmethod
    def directory(ctx):
        return os.path.join(ctx.dir, 'rabbitmq')

    def transport_url(self, ctx):
        sec = ctx.secrets()
        return 'rabbit://%s:%s@%s:%d/' % (sec['rabbit_user'],
                                          sec['rabbit_password'],
                                          ctx.info['host'],
                                          ctx.info['rabbit_port'])

    def _env(self, ctx):
        info, r = ctx.info, self.directory(ctx)
        env = dict(os.environ)
        env.update({
            'HOME': r,
            'RABBITMQ_CONF_ENV_FILE': os.path.join(r, 'rabbitmq-env.conf'),
            'RABBITMQ_CONFIG_FILE': os.path.join(r, 'rabbitmq.conf'),
            'RABBITMQ_ENABLED_PLUGINS_FILE': os.path.join(r,
                                                          'enabled_plugins'),
            'RABBITMQ_NODENAME': 'cinder-forcedetach-%d@localhost' %
                                 info['rabbit_port'],
            'RABBITMQ_USE_LONGNAME': 'false',
            'RABBITMQ_NODE_IP_ADDRESS': info['host'],
            'RABBITMQ_NODE_PORT': str(info['rabbit_port']),
            'RABBITMQ_DIST_PORT': str(info['rabbit_port'] + 1),
            'RABBITMQ_MNESIA_BASE': os.path.join(r, 'mnesia'),
            'RABBITMQ_LOG_BASE': os.path.join(r, 'log'),
            'RABBITMQ_PID_FILE': os.path.join(r, 'rabbitmq.pid'),
            'ERL_EPMD_ADDRESS': info['host'],
            'ERL_EPMD_PORT': str(info['epmd_port']),
            'RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS':
                '-kernel inet_dist_use_interface {%s}' %
                info['host'].replace('.', ','),
        })
        return env

    def write_conf(self, ctx):
        sec, r = ctx.secrets(), self.directory(ctx)
        # A broker database made with another password is of no use.
        mark = os.path.join(r, 'password.sha256')
        digest = hashlib.sha256(sec['rabbit_password'].encode()).hexdigest()
        try:
            with open(mark) as f:
                same = f.read() == digest
        except OSError:
            same = False
        if not same:
            shutil.rmtree(os.path.join(r, 'mnesia'), ignore_errors=True)
        for d in ('mnesia', 'log'):
            os.makedirs(os.path.join(r, d), exist_ok=True)
        boxutil.write_private(mark, digest)
        boxutil.write_private(os.path.join(r, 'rabbitmq-env.conf'), '')
        boxutil.write_private(os.path.join(r, 'enabled_plugins'), '[].\n')
        boxutil.write_private(os.path.join(r, 'rabbitmq.conf'), '\n'.join([
            'listeners.tcp.1 = %s:%d' % (ctx.info['host'],
                                         ctx.info['rabbit_port']),
            'default_user = %s' % sec['rabbit_user'],
            'default_pass = %s' % sec['rabbit_password'],
            'default_vhost = /',
            'loopback_users.guest = true',
            'log.console = false',
            'log.file.level = info',
            '']))

    def start(self, ctx):
        info = ctx.info
        epmd, broker = ctx.proc('epmd'), ctx.proc('rabbitmq')
        if not epmd.alive():
            epmd.start(['epmd', '-address', info['host'], '-port',
                        str(info['epmd_port'])])
            boxutil.wait_for(lambda: boxutil.port_open(
                info['host'], info['epmd_port']), 15, 'epmd', epmd)
        if broker.alive():
            return
        if not os.path.exists(RABBITMQ_SERVER):
            raise base.StackError('%s not found: install rabbitmq-server '
                                  '(tools/stack.sh up does)' %
                                  RABBITMQ_SERVER)
        os.makedirs(self.directory(ctx), exist_ok=True)
        self.write_conf(ctx)
        broker.start([RABBITMQ_SERVER], env=self._env(ctx),
                     cwd=self.directory(ctx))
        boxutil.wait_for(lambda: self.ready(ctx), ctx.s.timeout, 'rabbitmq',
                         broker)
        self._check_login(ctx)

    def ready(self, ctx):
        return amqp_ready(ctx.info['host'], ctx.info['rabbit_port'])

    def _check_login(self, ctx):
        """Log in as the cinder user with kombu (the URL is not on argv)."""
        python = os.path.join(ctx.info['venv'], 'bin', 'python')
        env = dict(os.environ, STACK_TRANSPORT_URL=self.transport_url(ctx))
        code = ('import os, kombu\n'
                'c = kombu.Connection(os.environ["STACK_TRANSPORT_URL"]'
                '.replace("rabbit://", "amqp://"), connect_timeout=5)\n'
                'c.connect(); c.release()\n')
        res = subprocess.run([python, '-c', code], env=env,
                             capture_output=True, text=True, timeout=60)
        if res.returncode:
            last = (res.stderr.strip().splitlines() or ['?'])[-1]
            raise base.StackError('cannot log in to rabbitmq as the cinder '
                                  'user: %s' % last)

    def detail(self, ctx, name):
        if name != 'rabbitmq':
            return '', True
        ok = self.ready(ctx)
        return 'amqp %s:%d %s' % (ctx.info['host'], ctx.info['rabbit_port'],
                                  base.answers(ok)), ok

    def ready_lines(self, ctx):
        return ['  rabbitmq   %s:%d, pid %s' % (
            ctx.info['host'], ctx.info['rabbit_port'],
            ctx.proc('rabbitmq').pid)]
