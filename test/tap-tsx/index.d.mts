export { importLoader, testFileExtensions, plugin, config } from './index.cjs';
