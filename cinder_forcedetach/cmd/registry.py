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

"""The one registry of cinder-forcedetach commands.

A command is a function ``f(resource, args, out)`` returning the exit code,
declared with :func:`command`; :func:`cinder_forcedetach.cmd.manage.
build_parser` turns the registry into ``cinder-forcedetach CATEGORY NAME``.
*resource* is what the command works through: an
:class:`~.api_client.Client` for an API command, Cinder's loaded
configuration for a ``local=True`` command (one that runs on a volume host
from cinder.conf, see :mod:`.local`).  *out* is an
:class:`~.output.Output`.
"""

import collections

Command = collections.namedtuple('Command', [
    'category', 'name', 'func', 'help', 'description', 'arguments',
    'local', 'what'])

COMMANDS = {}    # category -> {name: Command}
CATEGORIES = {}  # category -> help, when not "CATEGORY commands"


class Exclusive(tuple):
    """Arguments of which at most (*required*: exactly) one is given."""

    required = False


def arg(*args, **kwargs):
    """An argparse argument of a command."""
    return (args, kwargs)


def exclusive(*arguments, required=False):
    """A mutually exclusive group of :func:`arg` arguments."""
    group = Exclusive(arguments)
    group.required = required
    return group


def category(name, help):
    """Describe category *name* in ``--help``."""
    CATEGORIES[name] = help


def command(category, name, help, arguments=(), description=None,
            local=False, what=None):
    """Register the decorated function as ``CATEGORY NAME``.

    *name* None: the category is the command (``cinder-forcedetach audit``).

    *arguments*: :func:`arg` and :func:`exclusive` items.  *local*: the
    command runs on a volume host and gets cinder.conf's options
    (``--config-file``, ``--config-dir``, ``--debug``).  *what*: the
    action in error messages, formatted with the arguments (e.g.
    ``'refresh of attachment {attachment}'``); default ``CATEGORY NAME``.
    """
    def decorator(func):
        COMMANDS.setdefault(category, {})[name] = Command(
            category, name, func, help, description or help,
            list(arguments), local,
            what or ' '.join(n for n in (category, name) if n))
        return func
    return decorator


def add_arguments(parser, arguments):
    """Add :func:`arg`/:func:`exclusive` *arguments* to *parser*."""
    for item in arguments:
        if isinstance(item, Exclusive):
            group = parser.add_mutually_exclusive_group(
                required=item.required)
            for a_args, a_kwargs in item:
                group.add_argument(*a_args, **a_kwargs)
        else:
            a_args, a_kwargs = item
            parser.add_argument(*a_args, **a_kwargs)
