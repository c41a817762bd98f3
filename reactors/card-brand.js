/**
 * card-brand: identifies a card's brand and hands the card back to be tokenized.
 *
 *   POST /reactors/{id}/react  {"args": {"card": {"number": "4242424242424242", "expiration_month": 12, "expiration_year": 2030}}}
 *   → {"raw": {"brand": "visa", "last4": "4242"}, "tokens": {"card": {…the stored card token…}}}
 *
 * A missing or malformed card number is answered with a 400 (a thrown error with `status`
 * passes through). Nothing sensitive is logged: only the brand.
 */
const BRANDS = [
  ['amex', /^3[47]/, [15]],
  ['diners', /^3(?:0[0-5]|[689])/, [14, 15, 16, 17, 18, 19]],
  ['jcb', /^35(?:2[89]|[3-8])/, [16, 17, 18, 19]],
  ['visa', /^4/, [13, 16, 19]],
  ['mastercard', /^(?:5[1-5]|222[1-9]|22[3-9]|2[3-6]|27[01]|2720)/, [16]],
  ['discover', /^(?:6011|64[4-9]|65)/, [16, 17, 18, 19]],
  ['unionpay', /^62/, [16, 17, 18, 19]],
];

function luhn(digits) {
  let sum = 0;
  for (let i = 0; i < digits.length; i++) {
    let d = digits.charCodeAt(digits.length - 1 - i) - 48;
    if (i % 2 === 1) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return sum % 10 === 0;
}

function badRequest(message) {
  const err = new Error(message);
  err.status = 400;
  return err;
}

module.exports = async function (req) {
  const { args } = req;
  const card = args && args.card;
  const number = card && typeof card.number === 'string' ? card.number.replace(/[\s-]/g, '') : '';
  if (!/^\d{13,19}$/.test(number) || !luhn(number)) throw badRequest('args.card.number must be a valid card number');

  const match = BRANDS.find(([, prefix, lengths]) => prefix.test(number) && lengths.includes(number.length));
  const brand = match ? match[0] : 'unknown';
  console.log('card brand', brand);

  return {
    raw: { brand, last4: number.slice(-4) },
    tokenize: { card: { type: 'card', data: { ...card, number } } },
  };
};
