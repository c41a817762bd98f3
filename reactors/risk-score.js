/**
 * risk-score: a toy rule-based risk score for a payment, using the reactor's `configuration`
 * (string → string) for its thresholds; returns only `raw` (nothing to tokenize).
 *
 *   configuration: { max_amount: "100000", blocked_countries: "KP,IR" }
 *   args: { amount: 2500, currency: "EUR", country: "DE" }  →  raw: { score: 10, decision: "approve" }
 *
 * A request it cannot judge is refused with a 400; throwing any other error would be a 500.
 */
module.exports = async function ({ args, configuration }) {
  if (!args || typeof args.amount !== 'number' || typeof args.country !== 'string') {
    const err = new Error('args.amount (number) and args.country (string) are required');
    err.status = 400;
    throw err;
  }
  const maxAmount = Number(configuration.max_amount || '100000');
  const blocked = (configuration.blocked_countries || '').split(',').map((c) => c.trim().toUpperCase()).filter(Boolean);

  let score = 0;
  const reasons = [];
  if (blocked.includes(args.country.toUpperCase())) {
    score += 100;
    reasons.push('blocked_country');
  }
  if (args.amount > maxAmount) {
    score += 60;
    reasons.push('amount_over_limit');
  } else {
    score += Math.round((args.amount / maxAmount) * 40);
  }
  const decision = score >= 100 ? 'decline' : score >= 50 ? 'review' : 'approve';
  return { raw: { score, decision, reasons } };
};
