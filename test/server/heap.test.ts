import t from 'tap';
import { DEFAULT_HEAP_GROWING_PERCENT, heapFlags } from '../../src/heap.js';

t.test('the heap growth is set unless the node command line sets it', async (t) => {
  t.same(heapFlags([]), [`--heap-growing-percent=${DEFAULT_HEAP_GROWING_PERCENT}`], 'nothing given: the default');
  t.same(heapFlags(['--no-node-snapshot', '--max-old-space-size=512']), ['--heap-growing-percent=100'], 'other flags: the default too');
  t.same(heapFlags(['--heap-growing-percent=300']), [], 'given with a value: left as given');
  t.same(heapFlags(['--heap_growing_percent=50']), [], 'the underscore spelling counts as given');
  t.same(heapFlags(['--heap-growing-percent', '50']), [], 'given as two arguments');
  t.same(heapFlags(['--heap-growing-percentage=5']), ['--heap-growing-percent=100'], 'another flag that only starts the same is not it');
});
