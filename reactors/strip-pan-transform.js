/**
 * strip-pan-transform: a proxy code transform (request or response) that replaces the card
 * number in a JSON body's `card.number` with its last four digits, and says so in a header.
 *
 *   request_transforms: [{ type: code, code_file: ../reactors/strip-pan-transform.js }]
 *
 * Contract (README "Inbound proxy"): receives `args: { body, headers, method, path, query }` and returns
 * `{ body, headers }`. A body that is not JSON (a string) passes through unchanged.
 */
module.exports = async function (req) {
  const { body } = req.args;
  if (!body || typeof body !== 'object' || !body.card || typeof body.card.number !== 'string') {
    return { body };
  }
  const masked = { ...body, card: { ...body.card, number: body.card.number.slice(-4) } };
  return { body: masked, headers: { 'x-pan-stripped': 'true' } };
};
