/**
 * The Luhn check digit test (ISO/IEC 7812-1), on a string of ASCII digits. On the ground floor
 * because the log redaction (log.ts), the card validation (vault/card.ts) and the leak
 * guard (proxy/leak-guard.ts) all need it, and the log must not import the vault.
 */
export function luhnValid(digits: string): boolean {
  let sum = 0;
  let double = false;
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double = !double;
  }
  return sum % 10 === 0;
}
