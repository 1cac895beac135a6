// insta_id from node-postgres (pg). Every insta_id ID is larger than 2^53, the
// largest integer a JavaScript number holds exactly, so an id must never
// become a Number. The README's recipes are copied from the regions marked
// below; photos.test.js runs them against a real server.
'use strict';
const pg = require('pg');

const NUM_SHARDS = 4;

// docs:start default
// By default pg returns bigint (int8) columns as strings: exact, and ready for
// JSON. Keep them strings end to end; pass them back as parameters as they are.
async function addPhoto(client, userId, caption) {
  const shard = userId % NUM_SHARDS + 1;
  const { rows } = await client.query(
    `INSERT INTO insta${shard}.photos (user_id, caption) VALUES ($1, $2) RETURNING id`,
    [userId, caption]);
  return rows[0].id; // '4036372462433207297', a string
}
// docs:end default

// docs:start bigint
// To compute with ids (e.g. the shard bits), parse int8 as BigInt, for one
// query with its own type parser, or for every query with
// pg.types.setTypeParser(20, BigInt).
const bigintTypes = {
  getTypeParser: (oid, format) => (oid === 20 ? BigInt : pg.types.getTypeParser(oid, format)),
};

async function photosOfUser(client, userId) {
  const shard = userId % NUM_SHARDS + 1;
  const { rows } = await client.query({
    text: `SELECT id, caption FROM insta${shard}.photos WHERE user_id = $1 ORDER BY id`,
    values: [userId],
    types: bigintTypes,
  });
  return rows; // [{ id: 4036372462433207297n, caption: 'sunset' }, ...]
}

const shardOfId = (id) => Number((BigInt(id) >> 10n) & 0x1fffn); // as insta_id.shard_id(id)
// docs:end bigint

// docs:start json
// In JSON APIs send ids as strings, as large public APIs do: a JavaScript
// client parsing a number would round it. JSON.stringify throws on a BigInt,
// so turn BigInts into strings on the way out.
const toJson = (value) =>
  JSON.stringify(value, (key, v) => (typeof v === 'bigint' ? v.toString() : v));
// docs:end json

// docs:start fetch
// The other side: a browser (or node 18+) reading a JSON API that sends ids as
// strings, as the Django and SQLAlchemy examples' endpoints do. The id stays a
// string, and goes back into the next URL exactly as it came.
async function fetchPhoto(baseUrl, id) {
  const res = await fetch(new URL(`photos/${id}`, baseUrl));
  if (res.status === 404) return null;
  if (!res.ok) throw new Error(`GET photos/${id}: HTTP ${res.status}`);
  const photo = await res.json(); // { id: '4036372462433207297', user_id: '10', ... }
  for (const [key, v] of Object.entries(photo)) {
    if (typeof v === 'number' && !Number.isSafeInteger(v)) {
      throw new TypeError(`${key} reached JavaScript as the number ${BigInt(v)}: its low bits are lost`);
    }
  }
  return photo;
}
// docs:end fetch

// docs:start shortcode
// Instagram's shortcode of an id (a string or a BigInt, never a Number), as
// insta_id.shortcode(id): base 64, the 64 bits read unsigned.
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

function shortcode(id) {
  if (typeof id === 'string' ? !/^-?[0-9]+$/.test(id) : typeof id !== 'bigint') {
    throw new TypeError(`not an id: ${String(id)}`);
  }
  let n = BigInt(id);
  if (n !== BigInt.asIntN(64, n)) throw new RangeError(`${n} is not a bigint`);
  n = BigInt.asUintN(64, n);
  let code = '';
  do {
    code = ALPHABET[Number(n & 63n)] + code;
    n >>= 6n;
  } while (n > 0n);
  return code;
}

// The id of a shortcode, as insta_id.from_shortcode(code): a string, exact.
function fromShortcode(code) {
  if (code.length === 0) throw new RangeError('invalid shortcode: empty');
  let n = 0n;
  for (const c of code) {
    const digit = ALPHABET.indexOf(c);
    if (digit < 0) throw new RangeError(`invalid shortcode: ${JSON.stringify(code)}`);
    n = n * 64n + BigInt(digit);
  }
  if (n >= 1n << 64n) throw new RangeError(`invalid shortcode: ${JSON.stringify(code)} is past 64 bits`);
  return BigInt.asIntN(64, n).toString(); // a bigint, as PostgreSQL has it
}
// docs:end shortcode

module.exports = { NUM_SHARDS, addPhoto, photosOfUser, shardOfId, toJson, fetchPhoto, bigintTypes, shortcode, fromShortcode };
