/**
 * The hosted card field's expiry input: every way a shopper or a browser enters December 2030
 * (typed key by key with or without the slash the placeholder shows, filled, pasted, autofilled as
 * a whole value) gives the same complete field, `12 / 30`, tokenized as month 12, year 2030.
 */
import t from 'tap';
import { browserSkip } from '../helpers/browser.js';
import { KEYS } from '../helpers/service.js';
import { randomCard } from '../helpers/secrets.js';
import { F, openElementsPage, type ElementsPage } from './page.js';

const skip = browserSkip();
const FORMS = ['1230', '12/30', '12 / 30', '12/2030', '12 / 2030', '12-30'];

type Way = (p: ElementsPage, value: string) => Promise<void>;
const WAYS: Array<[string, Way]> = [
  ['typed key by key', async (p, v) => {
    await p.field('card').locator('#exp').focus();
    for (const key of v) await p.page.keyboard.type(key);
  }],
  ['filled', async (p, v) => p.field('card').locator('#exp').fill(v)],
  ['pasted', async (p, v) => {
    const exp = p.field('card').locator('#exp');
    await exp.evaluate((_e, text) => navigator.clipboard.writeText(text), v);
    await exp.focus();
    await p.page.keyboard.press('ControlOrMeta+V');
  }],
  ['autofilled (one input event with the whole value)', async (p, v) => p.field('card').locator('#exp').evaluate((e, text) => {
    (e as HTMLInputElement).value = text;
    e.dispatchEvent(new Event('input', { bubbles: true }));
  }, v)],
];

t.test('December 2030, entered every way, is the same complete expiry', { skip }, async (t) => {
  const p = await openElementsPage(t, { card: { kind: 'card' } }, { permissions: ['clipboard-read', 'clipboard-write'] });
  const card = randomCard('4');
  const f = p.field('card');
  await f.locator('#number').fill(card);
  await f.locator('#cvc').fill('123');
  for (const [way, enter] of WAYS) {
    for (const form of FORMS) {
      await f.locator('#exp').fill('');
      await enter(p, form);
      t.equal(await f.locator('#exp').inputValue(), '12 / 30', `${form}, ${way}: shows 12 / 30`);
      await f.locator('#exp').blur();
      const state = await p.lastChange('card');
      t.match(state, { complete: true, errors: [] }, `${form}, ${way}: the field is complete`);
      const out = await p.tk({ type: 'card', data: F('card') });
      if (!t.equal(out.ok, true, `${form}, ${way}: tokenized`)) continue;
      const read = await p.svc.call('GET', `/tokens/${(out.body as { id: string }).id}`, { key: KEYS.private });
      t.match(read.body.data, { expiration_month: 12, expiration_year: 2030 }, `${form}, ${way}: month 12, year 2030`);
    }
  }
});

t.test('deleting the expiry key by key goes back through the separator', { skip }, async (t) => {
  const p = await openElementsPage(t, { card: { kind: 'card' } });
  const exp = p.field('card').locator('#exp');
  await exp.focus();
  await p.page.keyboard.type('1230');
  t.equal(await exp.inputValue(), '12 / 30');
  const seen: string[] = [];
  for (let i = 0; i < 8 && (await exp.inputValue()) !== ''; i++) {
    await p.page.keyboard.press('Backspace');
    seen.push(await exp.inputValue());
  }
  t.equal(seen[seen.length - 1], '', `Backspace empties the input (${JSON.stringify(seen)})`);
  t.ok(seen.length <= 6, 'in no more presses than characters a person typed and the separator');
  await p.page.keyboard.type('7');
  t.equal(await exp.inputValue(), '07 / ', 'a month from 2 to 9 is completed with its leading zero');
  await exp.fill('');
  await p.page.keyboard.type('1/');
  t.equal(await exp.inputValue(), '01 / ', 'a single digit and a slash: month 01');
});
