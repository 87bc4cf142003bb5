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

"""MariaDB (``--db mariadb``): one server, a database per service.

A project-started ``mariadbd`` (own port, socket and data directory under
``STATE/mariadb``); each enabled service's databases, each with a user of
its name whose random password is kept in ``STATE/secrets.json``.
"""

import os
import shutil
import subprocess

from devbox import boxutil
from devbox.services import base


def first_errors(path, before=6, errors=5):
    """The server's first ``[ERROR]`` lines in *path*, with what led there.

    mariadb-install-db's closing lines are always the same advice, and its
    first ``[ERROR]`` may be a bare "Aborting" whose cause is a note or a
    warning just before it.  Without an ``[ERROR]``: the output's tail.
    """
    try:
        with open(path, errors='replace') as f:
            text = [line.rstrip() for line in f if line.strip()]
    except OSError:
        return ''
    first = next((i for i, line in enumerate(text) if '[ERROR]' in line),
                 None)
    if first is None:
        return boxutil.tail(path)
    shown = text[max(0, first - before):first] + [
        line for line in text[first:] if '[ERROR]' in line][:errors]
    return ''.join('\n  ' + line for line in shown)


class MariaDB(base.Service):

    name = 'mariadb'

    def enabled(self, info):
        return info.get('db') == 'mariadb'

    def ports(self, info):
        return {'mariadb': [info['db_port']]}

    @staticmethod
    def paths(ctx):
        d = os.path.join(ctx.dir, 'mariadb')
        return d, os.path.join(d, 'data'), os.path.join(d, 'mysqld.sock')

    def url(self, ctx, name):
        """SQLAlchemy URL of database *name* as its user."""
        password = ctx.secrets()[self._password_key(ctx, name)]
        return 'mysql+pymysql://%s:%s@%s:%d/%s?charset=utf8mb4' % (
            name, password, ctx.info['host'], ctx.info['db_port'], name)

    @staticmethod
    def _password_key(ctx, name):
        for svc in ctx.registry.values():
            if name in svc.databases:
                return svc.databases[name]
        raise KeyError(name)

    def start(self, ctx):
        d, data, sock = self.paths(ctx)
        info = ctx.info
        proc = ctx.proc(self.name)
        if not proc.alive():
            server, install_db = boxutil.which('mariadbd'), boxutil.which(
                'mariadb-install-db')
            if not server or not install_db:
                raise base.StackError('mariadbd not found: install '
                                      'mariadb-server (tools/install-deps.sh '
                                      'does)')
            if not os.path.isdir(os.path.join(data, 'mysql')):
                shutil.rmtree(data, ignore_errors=True)
                os.makedirs(data)
                out = os.path.join(ctx.log_dir, 'mariadb-install-db.out')
                with open(out, 'ab') as f:
                    res = subprocess.run(
                        [install_db, '--no-defaults', '--datadir=' + data,
                         '--user=root', '--skip-test-db',
                         '--auth-root-authentication-method=socket'],
                        stdin=subprocess.DEVNULL, stdout=f,
                        stderr=subprocess.STDOUT, cwd=d, timeout=300)
                if res.returncode:
                    raise base.StackError(
                        'mariadb-install-db failed (exit %d); see %s%s' % (
                            res.returncode, out, first_errors(out)))
            proc.start([server, '--no-defaults', '--datadir=' + data,
                        '--socket=' + sock,
                        '--pid-file=' + os.path.join(d, 'mariadbd.pid'),
                        '--bind-address=' + info['host'],
                        '--port=%d' % info['db_port'], '--user=root',
                        '--skip-name-resolve', '--skip-log-bin',
                        '--log-error=' + os.path.join(ctx.log_dir,
                                                      'mariadb.log'),
                        '--innodb-buffer-pool-size=128M',
                        # A test box: speed over durability of the last
                        # second of commits when the machine itself dies.
                        '--innodb-flush-log-at-trx-commit=2',
                        '--max-connections=500',
                        '--character-set-server=utf8mb4'])
            boxutil.wait_for(lambda: self.ready(ctx), ctx.s.timeout,
                             'mariadb', proc)
        for svc in ctx.registry.values():
            if svc.enabled(info):
                for name, key in svc.databases.items():
                    self.create_database(ctx, name, ctx.secrets()[key])

    def ready(self, ctx):
        sock = self.paths(ctx)[2]
        return os.path.exists(sock) and boxutil.port_open(
            ctx.info['host'], ctx.info['db_port'])

    def create_database(self, ctx, name, password):
        """Database *name* and its user *name* (password on stdin)."""
        sock = self.paths(ctx)[2]
        sql = ("CREATE DATABASE IF NOT EXISTS %(db)s CHARACTER SET utf8mb4;\n"
               "CREATE USER IF NOT EXISTS '%(db)s'@'127.%%' IDENTIFIED BY "
               "'%(pw)s';\n"
               "ALTER USER '%(db)s'@'127.%%' IDENTIFIED BY '%(pw)s';\n"
               "GRANT ALL PRIVILEGES ON %(db)s.* TO '%(db)s'@'127.%%';\n"
               % {'db': name, 'pw': password})
        res = subprocess.run([boxutil.which('mariadb'), '--no-defaults',
                              '--socket=' + sock, '--user=root'], input=sql,
                             text=True, capture_output=True, timeout=60)
        if res.returncode:
            raise base.StackError(
                'cannot create the %s database and user: %s' % (
                    name, res.stderr.strip().replace(password, '***')))

    def detail(self, ctx, name):
        return 'mysql %s:%d, database cinder' % (ctx.info['host'],
                                                 ctx.info['db_port']), True

    def ready_lines(self, ctx):
        return ['  mariadb    %s:%d, pid %s (database cinder)' % (
            ctx.info['host'], ctx.info['db_port'], ctx.proc(self.name).pid)]
