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

"""How every cinder-forcedetach command prints its result.

``table``: one object as a Property/Value table (nested keys dotted, list
items indexed), a list of objects as one row each; ``json``: the data,
indented, keys sorted; ``value``: the values only, one object's one per
line, a list's one row per line, for shell scripts.

:func:`mask_secrets` hides CHAP passwords, keys, keyrings and tokens.
"""

import json
import re
import sys

FORMATS = ('table', 'json', 'value')
MASK = '***'
# Values that are secrets: CHAP passwords, keys, keyrings, tokens.  Not
# secret_uuid/secret_type, which only name a libvirt secret.
SECRET_RE = re.compile(r'(pass(word|wd)?|token|credential|keyring|^key$|'
                       r'_key$|^secret$|_secret$)', re.IGNORECASE)


def mask_secrets(value):
    """A copy of *value* with the values of secret-looking keys masked."""
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and SECRET_RE.search(k) and
                    v not in (None, '') else mask_secrets(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value


def flatten(value, prefix=''):
    """[(dotted key, text)] rows of nested dicts and lists of objects."""
    rows = []
    if isinstance(value, dict) and value:
        for key in value:
            name = '%s.%s' % (prefix, key) if prefix else str(key)
            rows.extend(flatten(value[key], name))
    elif isinstance(value, list) and value and any(
            isinstance(v, (dict, list)) for v in value):
        for i, item in enumerate(value):
            rows.extend(flatten(item, '%s[%d]' % (prefix, i)))
    else:
        if isinstance(value, (dict, list)):
            value = json.dumps(value)
        rows.append((prefix, '' if value is None else str(value)))
    return rows


def cell(value):
    """A list-row cell: lists comma-joined, None empty."""
    if isinstance(value, (list, tuple)):
        return ','.join(str(v) for v in value)
    return '' if value is None else str(value)


def table(header, rows):
    """A ``+---+`` bordered text table, each column as wide as it needs."""
    widths = [max([len(h)] + [len(r[i]) for r in rows])
              for i, h in enumerate(header)]
    line = '+-%s-+' % '-+-'.join('-' * w for w in widths)

    def fmt(cells):
        return '| %s |' % ' | '.join(c.ljust(w)
                                     for c, w in zip(cells, widths))
    return '\n'.join([line, fmt(header), line] + [fmt(r) for r in rows] +
                     [line]) + '\n'


class Output(object):
    """Prints results in one of :data:`FORMATS` on a stream."""

    def __init__(self, fmt='table', stream=None):
        self.fmt = fmt
        self.stream = stream or sys.stdout

    def _json(self, data):
        self.stream.write(json.dumps(data, indent=2, sort_keys=True) + '\n')

    def emit(self, data):
        """Print one object."""
        if self.fmt == 'json':
            return self._json(data)
        rows = flatten(data)
        if self.fmt == 'value':
            self.stream.write(''.join(v + '\n' for _k, v in rows))
            return
        self.stream.write(table(('Property', 'Value'), rows))

    def emit_list(self, items, columns):
        """Print a list of objects: their *columns*, one row each."""
        if self.fmt == 'json':
            return self._json(items)
        rows = [[cell(i.get(c)) for c in columns] for i in items]
        if self.fmt == 'value':
            self.stream.write(''.join(' '.join(r) + '\n' for r in rows))
            return
        self.stream.write(table(columns, rows))


def emit(data, fmt, stream):
    """:meth:`Output.emit` in one call."""
    Output(fmt, stream).emit(data)


def emit_list(items, columns, fmt, stream):
    """:meth:`Output.emit_list` in one call."""
    Output(fmt, stream).emit_list(items, columns)
