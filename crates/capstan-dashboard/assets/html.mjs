// htm's tagged templates bound to Preact's createElement: the page's markup, with no build step.
import htm from './vendor/htm.mjs';
import { h } from './vendor/preact.mjs';

export const html = htm.bind(h);
