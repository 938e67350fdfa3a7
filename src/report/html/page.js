// memprof's HTML report: a timeline of the heap, a flamegraph of any moment or range, a
// search box and a table of sites, from the pre-aggregated data of src/report/html.rs
// (its module documentation describes the data).
(function () {
  'use strict';
  const D = JSON.parse(document.getElementById('data').textContent);
  const R = D.interval, EXACT = R === 1, N = D.n, W = D.w, SPAN = N * W;
  const $ = (id) => document.getElementById(id);
  const SVGNS = 'http://www.w3.org/2000/svg';

  // ---- Numbers and words ----
  function bytes(n) {
    const units = ['KiB', 'MiB', 'GiB', 'TiB'];
    if (Math.abs(n) < 1024) return Math.round(n) + ' B';
    let v = n / 1024, u = 0;
    while (Math.abs(v) >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    return v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0) + ' ' + units[u];
  }
  function ns(n) {
    if (n >= 1e9) return (n / 1e9).toFixed(3) + ' s';
    if (n >= 1e6) return (n / 1e6).toFixed(2) + ' ms';
    if (n >= 1e3) return (n / 1e3).toFixed(1) + ' µs';
    return Math.round(n) + ' ns';
  }
  const secs = (t) => (t / 1e9).toFixed(3) + ' s';
  // A peak [bytes, time, 95 % half width]: sampled, the cross-fitted estimate and its interval.
  const peakBytes = (p) => bytes(p[0]) + (p[2] > 0 ? ' ± ' + bytes(p[2]) : '');
  const grouped = (n) => Math.round(n).toLocaleString('en-US').replace(/,/g, '\u2009');
  const pct = (a, b) => (b > 0 ? (100 * a / b).toFixed(1) : '0.0') + ' %';
  const esc = (s) => s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
  // A "nice" axis step near span/count: 1, 2 or 5 × a power of ten of the unit `base`.
  function niceStep(span, count, base) {
    const raw = span / count / base;
    const p = Math.pow(10, Math.floor(Math.log10(raw || 1)));
    const m = raw / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p * base;
  }

  // ---- The tree of frames ----
  const NN = D.nodes.length / 2 + 1;
  const parent = new Int32Array(NN), nameOf = new Int32Array(NN), depth = new Int32Array(NN);
  parent[0] = -1; nameOf[0] = -1;
  const kids = Array.from({ length: NN }, () => []);
  for (let i = 1; i < NN; i++) {
    parent[i] = D.nodes[2 * i - 2]; nameOf[i] = D.nodes[2 * i - 1];
    depth[i] = depth[parent[i]] + 1;
    kids[parent[i]].push(i);
  }
  const nodeName = (i) => (i === 0 ? 'all' : D.names[nameOf[i]]);
  for (const k of kids) k.sort((a, b) => (nodeName(a) < nodeName(b) ? -1 : nodeName(a) > nodeName(b) ? 1 : 0));
  const siteOf = new Int32Array(NN).fill(-1);
  for (let i = 0; i < D.sites.length; i += 2) siteOf[D.sites[i]] = D.sites[i + 1];

  // ---- A process tree: each process's root frame and series (html.rs §4) ----
  const PROCS = D.procs || null;
  // The process of each node (-1: none, or not a tree). A node comes after its parent.
  const procOf = new Int32Array(NN).fill(-1);
  if (PROCS) {
    PROCS.forEach((p, i) => { if (p.node > 0) procOf[p.node] = i; });
    for (let i = 1; i < NN; i++) if (parent[i] > 0) procOf[i] = procOf[parent[i]];
  }
  // The series the timeline draws: the selected process's, or the whole run's.
  const cur = () => (PROCS && state.proc >= 0 ? PROCS[state.proc] : D);

  // ---- Views: a value per node (its own, not its children's) ----
  const state = { view: 'peak', moment: N, from: 0, to: N, zoom: 0, sort: 'v', asc: false, proc: -1 };
  // The values of the selected process's nodes only (all of them when none is selected).
  function values() {
    const r = allValues();
    if (PROCS && state.proc >= 0) {
      for (let i = 0; i < NN; i++) {
        if (procOf[i] !== state.proc) { r.self[i] = 0; if (r.count) r.count[i] = 0; }
      }
    }
    return r;
  }
  function allValues() {
    const self = new Float64Array(NN), count = new Float64Array(NN);
    const c = D.cells, v = state.view;
    const pairs = (a, scale) => { for (let i = 0; i < a.length; i += 2) self[a[i]] += a[i + 1] * scale; };
    if (v === 'live' || v === 'alloc') {
      const m = state.moment, lo = state.from, hi = state.to;
      for (let i = 0; i < c.length; i += 5) {
        const a = c[i + 1];
        const keep = v === 'live' ? a < m && c[i + 2] >= m : a >= lo && a < hi;
        if (keep) { self[c[i]] += c[i + 3] * R; count[c[i]] += c[i + 4]; }
      }
      return { self, count };
    }
    if (v === 'peak') pairs(D.peakv, R);
    else if (v === 'short') pairs(D.short, R);
    else pairs(D.gcv, 1);
    return { self, count: null };
  }
  function totals(self) {
    const tot = Float64Array.from(self);
    for (let i = NN - 1; i > 0; i--) tot[parent[i]] += tot[i];
    return tot;
  }
  // The live heap at every bucket boundary, from the cells (of process `p`, or all: -1).
  const liveAts = new Map();
  function liveAtOf(p) {
    if (liveAts.has(p)) return liveAts.get(p);
    const d = new Float64Array(N + 2), c = D.cells;
    for (let i = 0; i < c.length; i += 5) {
      if (p >= 0 && procOf[c[i]] !== p) continue;
      d[c[i + 1] + 1] += c[i + 3] * R; d[c[i + 2] + 1] -= c[i + 3] * R;
    }
    const out = new Float64Array(N + 1);
    let s = 0;
    for (let i = 0; i <= N; i++) { s += d[i]; out[i] = s; }
    liveAts.set(p, out);
    return out;
  }

  // ---- Header ----
  function header() {
    const exe = D.exe || 'unknown executable';
    $('prog').textContent = exe.split('/').pop();
    $('cmd').textContent = (D.cmd.length ? D.cmd.join(' ') : exe) + (D.pid ? '   (pid ' + D.pid + ')' : '');
    const facts = [
      D.whole ? (EXACT ? '<b>exact</b>: every allocation recorded' : 'sampled: mean interval <b>' + bytes(R) + '</b>')
        : '<b class="lost">sampling: ' + esc(D.sampling) + '</b>',
      '<b>' + grouped(D.samples) + '</b> ' + (EXACT ? 'allocations' : 'samples') + ', <b>' + grouped(D.frees) + '</b> frees',
      'run: <b>' + secs(D.end) + '</b>',
      'peak: <b>' + peakBytes(D.peak) + '</b> live at ' + secs(D.peak[1]),
      'timeline resolution: ' + ns(W),
    ];
    if (D.start) facts.push('recorded ' + new Date(D.start / 1e6).toISOString().replace('T', ' ').slice(0, 19) + ' UTC');
    $('facts').innerHTML = facts.map((f) => '<span>' + f + '</span>').join('');
    $('memory').innerHTML = D.memory.map((l) => '<li>' + esc(l) + '</li>').join('');
    $('notes').innerHTML = D.notes.map((n) => '<li>' + esc(n) + '</li>').join('');
    $('warnings').innerHTML = D.warnings.map((w) => '<li>' + esc(w) + '</li>').join('');
    $('hints').innerHTML = (D.hints || []).map((h) => '<li>' + esc(h) + '</li>').join('');
    if (PROCS) {
      $('prog').textContent = exe.split('/').pop() + ' and ' + (PROCS.length - 1) + ' other processes';
      const sel = $('proc');
      const opt = (value, text) => { const o = document.createElement('option'); o.value = String(value); o.textContent = text; return o; };
      sel.append(opt(-1, 'All ' + PROCS.length + ' processes (merged flamegraph)'));
      PROCS.forEach((p, i) => sel.append(opt(i, (p.exe.split('/').pop() || '?') + ' [pid ' + p.pid + (p.ppid ? ', parent ' + p.ppid : '') + '] \u2014 ' + bytes(p.allocated) + ' allocated, ' + p.file)));
      sel.addEventListener('change', () => { state.proc = +sel.value; state.zoom = 0; render(); });
      $('procs').hidden = false;
    }
    if (!D.gcv.length) document.querySelector('[data-view=gc]').disabled = true;
    if (EXACT) document.querySelector('#sites .ci').style.display = 'none';
    document.querySelector('#sites [data-key=n]').textContent = EXACT ? 'Blocks' : 'Samples';
  }

  // ---- Timeline ----
  const tl = { ml: 74, mr: 78, mt: 26, mb: 40, w: 0, h: 0 };
  const tx = (t) => tl.ml + (t / SPAN) * (tl.w - tl.ml - tl.mr);
  const tOf = (x) => Math.min(SPAN, Math.max(0, ((x - tl.ml) / (tl.w - tl.ml - tl.mr)) * SPAN));
  function el(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function timeline() {
    const svg = $('timeline');
    const box = svg.getBoundingClientRect();
    tl.w = box.width; tl.h = box.height;
    svg.setAttribute('viewBox', '0 0 ' + tl.w + ' ' + tl.h);
    svg.textContent = '';
    const y0 = tl.h - tl.mb, ph = tl.h - tl.mt - tl.mb;
    const S = cur();
    // The resident size (the process's, read by `memprof record`), on the heap's scale.
    const R = D.rss.length === N ? D.rss : [];
    const maxLive = Math.max(1, S.peak[0], ...S.max, ...R);
    const rates = S.alloc.map((b) => b / (W / 1e9));
    const maxRate = Math.max(1, ...rates);
    const unit = (v) => Math.pow(1024, Math.max(0, Math.floor(Math.log(v) / Math.log(1024))));
    const yStep = niceStep(maxLive, 4, unit(maxLive)), rStep = niceStep(maxRate, 4, unit(maxRate));
    const yTop = Math.ceil(maxLive / yStep) * yStep, rTop = Math.ceil(maxRate / rStep) * rStep;
    const ly = (v) => y0 - (v / yTop) * ph, ry = (v) => y0 - (v / rTop) * ph;
    for (let v = 0; v <= yTop + 1e-9; v += yStep) {
      svg.append(el('line', { x1: tl.ml, x2: tl.w - tl.mr, y1: ly(v), y2: ly(v), class: 'grid' }));
      svg.append(el('text', { x: tl.ml - 6, y: ly(v) + 4, 'text-anchor': 'end' }, bytes(v)));
    }
    for (let v = 0; v <= rTop + 1e-9; v += rStep) {
      svg.append(el('text', { x: tl.w - tl.mr + 6, y: ry(v) + 4, fill: 'var(--rate)' }, bytes(v) + '/s'));
    }
    const tStep = niceStep(SPAN, Math.max(2, Math.floor((tl.w - tl.ml - tl.mr) / 90)), 1);
    for (let t = 0; t <= SPAN + 1e-9; t += tStep) {
      svg.append(el('line', { x1: tx(t), x2: tx(t), y1: y0, y2: y0 + 5, class: 'axis' }));
      const digits = Math.max(0, Math.min(6, -Math.floor(Math.log10(tStep / 1e9) + 1e-9)));
      svg.append(el('text', { x: tx(t), y: y0 + 18, 'text-anchor': 'middle' }, (t / 1e9).toFixed(digits) + ' s'));
    }
    svg.append(el('text', { x: (tl.ml + tl.w - tl.mr) / 2, y: tl.h - 4, 'text-anchor': 'middle', class: 'axis-title' }, 'time since the start of the recording'));
    svg.append(el('text', { x: 4, y: 14, class: 'axis-title' }, R.length ? 'live heap, resident' : 'live heap'));
    svg.append(el('text', { x: tl.w - 4, y: 14, 'text-anchor': 'end', class: 'axis-title', fill: 'var(--rate)' }, 'allocation rate'));
    for (let i = 0; i < D.gcc.length; i += 2) {
      const x = tx(D.gcc[i]), w = Math.max(1, tx(D.gcc[i + 1]) - x);
      svg.append(el('rect', { x, y: tl.mt, width: w, height: ph, fill: 'var(--gc)' }));
    }
    let live = 'M' + tx(0) + ',' + y0, rate = '';
    for (let i = 0; i < N; i++) {
      live += 'L' + tx(i * W) + ',' + ly(S.max[i]) + 'L' + tx((i + 1) * W) + ',' + ly(S.max[i]);
      rate += (i ? 'L' : 'M') + tx((i + 0.5) * W) + ',' + ry(rates[i]);
    }
    live += 'L' + tx(SPAN) + ',' + y0 + 'Z';
    svg.append(el('path', { d: live, fill: 'var(--live)', 'fill-opacity': 0.28, stroke: 'var(--live)', 'stroke-width': 1.5 }));
    svg.append(el('path', { d: rate, fill: 'none', stroke: 'var(--rate)', 'stroke-width': 1.3, 'stroke-opacity': 0.85 }));
    if (R.length) {
      let rss = '';
      for (let i = 0; i < N; i++) rss += (i ? 'L' : 'M') + tx(i * W) + ',' + ly(R[i]) + 'L' + tx((i + 1) * W) + ',' + ly(R[i]);
      svg.append(el('path', { d: rss, fill: 'none', stroke: 'var(--rss)', 'stroke-width': 1.6 }));
    }
    $('legend-rss').hidden = !R.length;
    svg.append(el('line', { x1: tl.ml, x2: tl.w - tl.mr, y1: y0, y2: y0, class: 'axis' }));
    svg.append(el('line', { x1: tl.ml, x2: tl.ml, y1: tl.mt, y2: y0, class: 'axis' }));
    const px = tx(S.peak[1]), py = ly(S.peak[0]);
    svg.append(el('circle', { cx: px, cy: py, r: 4.5, fill: 'var(--peak)', stroke: '#fff', 'stroke-width': 1.5 }));
    const right = px > tl.w * 0.7;
    svg.append(el('text', { x: px + (right ? -8 : 8), y: Math.max(tl.mt + 10, py - 6), 'text-anchor': right ? 'end' : 'start', class: 'peak-label' }, 'peak ' + peakBytes(S.peak) + ' at ' + secs(S.peak[1])));
    // The selection: a moment (live, peak) or a range (allocated).
    const v = state.view;
    if (v === 'alloc' && (state.from > 0 || state.to < N)) {
      const x = tx(state.from * W);
      svg.append(el('rect', { x, y: tl.mt, width: Math.max(1, tx(state.to * W) - x), height: ph, fill: 'var(--sel)', stroke: 'var(--rate)' }));
    } else if (v === 'live' || v === 'peak') {
      const t = v === 'live' ? state.moment * W : S.peak[1], x = tx(t);
      svg.append(el('line', { x1: x, x2: x, y1: tl.mt - 4, y2: y0, stroke: 'var(--ink)', 'stroke-width': 1.5, 'stroke-dasharray': '4 3' }));
      if (v === 'live') {
        const right2 = x > tl.w * 0.75;
        svg.append(el('text', { x: x + (right2 ? -6 : 6), y: tl.mt + 4, 'text-anchor': right2 ? 'end' : 'start', class: 'sel-label' }, secs(t) + ': ' + bytes(liveAtOf(PROCS ? state.proc : -1)[state.moment])));
      }
    }
    svg.dataset.x0 = tl.ml; svg.dataset.x1 = tl.w - tl.mr; svg.dataset.span = SPAN;
  }
  function timelineEvents() {
    const svg = $('timeline');
    let down = null;
    const xOf = (e) => e.clientX - svg.getBoundingClientRect().left;
    svg.addEventListener('mousedown', (e) => { down = xOf(e); e.preventDefault(); });
    svg.addEventListener('mousemove', (e) => {
      const t = tOf(xOf(e)), i = Math.min(N - 1, Math.floor(t / W));
      const S = cur();
      const rss = D.rss.length === N ? '<br>resident up to ' + bytes(D.rss[i]) : '';
      tip(e, '<b>' + secs(t) + '</b><br>live heap up to ' + bytes(S.max[i]) + rss + '<br>allocated ' + bytes(S.alloc[i]) + ' in ' + ns(W) + ' (' + bytes(S.alloc[i] / (W / 1e9)) + '/s)');
      if (down !== null && Math.abs(xOf(e) - down) > 4) {
        state.view = 'alloc';
        state.from = Math.floor(Math.min(tOf(down), t) / W);
        state.to = Math.max(state.from + 1, Math.ceil(Math.max(tOf(down), t) / W));
        timeline();
      }
    });
    svg.addEventListener('mouseleave', () => hideTip());
    window.addEventListener('mouseup', (e) => {
      if (down === null) return;
      const x = xOf(e), dragged = Math.abs(x - down) > 4;
      if (dragged) {
        const a = tOf(Math.min(x, down)), b = tOf(Math.max(x, down));
        state.view = 'alloc';
        state.from = Math.floor(a / W);
        state.to = Math.min(N, Math.max(state.from + 1, Math.ceil(b / W)));
      } else {
        state.view = 'live';
        state.moment = Math.min(N, Math.max(0, Math.round(tOf(x) / W)));
      }
      down = null;
      state.zoom = 0;
      render();
    });
  }

  // ---- Flamegraph (icicle: the root on top) ----
  const ROW = 18;
  function hue(s) {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
    h >>>= 0;
    return 'hsl(' + (8 + (h % 44)) + ',' + (72 + ((h >>> 8) % 18)) + '%,' + (60 + ((h >>> 16) % 12)) + '%)';
  }
  let current = null;
  function flame(tot, what) {
    const box = $('flame');
    const width = box.clientWidth || 800, total = tot[0];
    box.dataset.total = String(Math.round(total));
    box.dataset.view = state.view;
    if (!(total > 0)) {
      box.innerHTML = '<div class="empty">Nothing to show: no ' + what + ' in this view.</div>';
      box.dataset.frames = '0';
      return;
    }
    const z = state.zoom, out = [];
    const re = searchRe();
    let frames = 0, maxDepth = 0;
    const draw = (n, x, w, d, anc) => {
      const name = nodeName(n), hit = re && n !== 0 && re.test(name);
      const cls = (anc ? 'anc' : '') + (hit ? ' hit' : '');
      const chars = Math.floor((w - 6) / 7);
      const label = chars < 3 ? '' : name.length <= chars ? name : name.slice(0, chars - 1) + '…';
      out.push('<g data-n="' + n + '"' + (cls.trim() ? ' class="' + cls.trim() + '"' : '') + '><rect x="' + x.toFixed(1) + '" y="' + d * ROW + '" width="' + Math.max(0.5, w - 0.5).toFixed(1) + '" height="' + (ROW - 1) + '" fill="' + (n === 0 ? '#e9ecef' : hue(name)) + '"/>' + (label ? '<text x="' + (x + 4).toFixed(1) + '" y="' + (d * ROW + 13) + '">' + esc(label) + '</text>' : '') + '</g>');
      frames++;
      maxDepth = Math.max(maxDepth, d);
    };
    // The zoomed frame's ancestors span the width; its subtree fills it.
    const chain = [];
    for (let n = z; n > 0; n = parent[n]) chain.unshift(n);
    draw(0, 0, width, 0, z !== 0);
    chain.forEach((n, i) => draw(n, 0, width, i + 1, n !== z));
    const scale = width / (tot[z] || 1);
    const walk = (n, x, d) => {
      for (const c of kids[n]) {
        const w = tot[c] * scale;
        if (w >= 0.4) { draw(c, x, w, d, false); walk(c, x, d + 1); }
        x += w;
      }
    };
    walk(z, 0, depth[z] + 1);
    box.innerHTML = '<svg xmlns="' + SVGNS + '" width="' + width + '" height="' + ((maxDepth + 1) * ROW + 2) + '">' + out.join('') + '</svg>';
    box.dataset.frames = String(frames);
  }
  function searchRe() {
    const q = $('search').value.trim();
    if (!q) return null;
    try { return new RegExp(q, 'i'); } catch (e) { return new RegExp(q.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i'); }
  }
  // Bytes under matching frames, each counted once (not again under a matching ancestor).
  function matched(tot) {
    const re = searchRe(), m = $('match');
    if (!re) { m.textContent = ''; delete m.dataset.bytes; return; }
    let sum = 0;
    const hit = new Uint8Array(NN);
    for (let i = 1; i < NN; i++) {
      if (hit[parent[i]]) { hit[i] = 1; continue; }
      if (tot[i] > 0 && re.test(nodeName(i))) { hit[i] = 1; sum += tot[i]; }
    }
    m.dataset.bytes = String(Math.round(sum));
    m.textContent = 'matched: ' + fmt(sum) + ' (' + pct(sum, tot[0]) + ')';
  }
  const unitName = () => (state.view === 'gc' ? 'mark time' : 'bytes');
  const fmt = (v) => (state.view === 'gc' ? ns(v) : bytes(v));

  // ---- Sites ----
  function sites(self, count, total) {
    const by = new Map();
    for (let i = 1; i < NN; i++) {
      if (!(self[i] > 0)) continue;
      const s = siteOf[i] >= 0 ? D.names[siteOf[i]] : nodeName(i);
      const e = by.get(s) || { name: s, v: 0, n: 0 };
      e.v += self[i]; e.n += count ? count[i] : 0;
      by.set(s, e);
    }
    const gc = state.view === 'gc';
    const rows = [...by.values()];
    for (const r of rows) { r.share = r.v / total; r.ci = gc ? 0 : D.z95 * Math.sqrt(r.v * Math.max(0, R - 1)); }
    const k = state.sort, dir = state.asc ? 1 : -1;
    rows.sort((a, b) => (a[k] < b[k] ? -dir : a[k] > b[k] ? dir : a.name < b.name ? -1 : 1));
    const top = rows.slice(0, 200), maxV = Math.max(...top.map((r) => r.v), 1);
    document.querySelector('#sites [data-key=v]').textContent = gc ? 'Mark time' : 'Bytes';
    document.querySelectorAll('#sites th').forEach((th) => {
      th.classList.toggle('sorted', th.dataset.key === k);
      th.classList.toggle('asc', state.asc);
    });
    const ciCell = (r) => (EXACT ? '' : '<td class="ci">' + (gc ? '' : '± ' + bytes(r.ci)) + '</td>');
    $('sites').tBodies[0].innerHTML = top.map((r) => '<tr><td class="l">' + esc(r.name) + '</td><td><span class="bar" style="width:' + Math.round(60 * r.v / maxV) + 'px"></span>' + fmt(r.v) + '</td>' + ciCell(r) + '<td>' + pct(r.v, total) + '</td><td>' + (count ? grouped(r.n) : '–') + '</td></tr>').join('');
    $('sites-note').textContent = rows.length > top.length ? 'the largest 200 of ' + rows.length + ' sites' : rows.length + ' sites';
  }

  // ---- The whole page ----
  function describe() {
    const m = $('moment'), f = $('flame');
    delete m.dataset.ns;
    m.textContent = '';
    f.dataset.from = String(state.view === 'alloc' ? state.from * W : 0);
    f.dataset.to = String(state.view === 'alloc' ? state.to * W : SPAN);
    const v = state.view;
    if (v === 'peak' || v === 'live') {
      const t = v === 'peak' ? cur().peak[1] : state.moment * W;
      m.dataset.ns = String(t);
      m.textContent = '(' + grouped(t) + ' ns)';
      if (v === 'peak' && PROCS && state.proc < 0) { delete m.dataset.ns; m.textContent = ''; return 'Live at each process\'s own peak'; }
      return v === 'peak' ? 'Live at the peak, ' + secs(t) : 'Live at ' + secs(t) + (state.moment === N ? ' (the end)' : '');
    }
    if (v === 'alloc') {
      const whole = state.from === 0 && state.to === N;
      return 'Allocated ' + (whole ? 'over the whole run' : 'from ' + secs(state.from * W) + ' to ' + secs(Math.min(state.to * W, SPAN)));
    }
    if (v === 'short') return 'Short-lived: blocks freed less than ' + ns(D.short_ns) + ' after their allocation (whole run)';
    return 'Estimated GC mark time by allocation site (whole run)';
  }
  let vals = null;
  function render() {
    document.querySelectorAll('.views button').forEach((b) => b.classList.toggle('on', b.dataset.view === state.view));
    vals = values();
    current = totals(vals.self);
    const what = describe();
    $('what').textContent = what + ': ' + fmt(current[0]);
    flame(current, unitName());
    matched(current);
    sites(vals.self, vals.count, current[0]);
    timeline();
  }
  function tip(e, html) {
    const t = $('tip');
    t.innerHTML = html;
    t.hidden = false;
    const w = t.offsetWidth, h = t.offsetHeight;
    t.style.left = Math.min(window.innerWidth - w - 8, e.clientX + 14) + 'px';
    t.style.top = (e.clientY + h + 20 > window.innerHeight ? e.clientY - h - 10 : e.clientY + 16) + 'px';
  }
  const hideTip = () => { $('tip').hidden = true; };

  header();
  document.querySelectorAll('.views button').forEach((b) => b.addEventListener('click', () => {
    state.view = b.dataset.view; state.zoom = 0; render();
  }));
  $('search').addEventListener('input', () => { flame(current, unitName()); matched(current); });
  $('reset').addEventListener('click', () => { state.zoom = 0; render(); });
  const fl = $('flame');
  fl.addEventListener('click', (e) => {
    const g = e.target.closest('g[data-n]');
    if (!g) return;
    state.zoom = +g.dataset.n;
    flame(current, unitName());
  });
  fl.addEventListener('mousemove', (e) => {
    const g = e.target.closest('g[data-n]');
    if (!g) { hideTip(); return; }
    const n = +g.dataset.n;
    tip(e, '<div class="fn">' + esc(nodeName(n)) + '</div>' + fmt(current[n]) + ' · ' + pct(current[n], current[0]) + ' of the view' + (state.zoom ? ' · ' + pct(current[n], current[state.zoom]) + ' of the zoomed frame' : ''));
  });
  fl.addEventListener('mouseleave', hideTip);
  document.querySelectorAll('#sites th').forEach((th) => th.addEventListener('click', () => {
    const k = th.dataset.key;
    state.asc = state.sort === k ? !state.asc : k === 'name';
    state.sort = k;
    sites(vals.self, vals.count, current[0]);
  }));
  timelineEvents();
  let resized = 0;
  window.addEventListener('resize', () => { clearTimeout(resized); resized = setTimeout(render, 100); });
  render();
  // For tests and tools: where a moment is on the screen, and how long the page took.
  window.memprof = {
    clientX: (t) => $('timeline').getBoundingClientRect().left + tx(t),
    clientY: () => $('timeline').getBoundingClientRect().top + tl.mt + (tl.h - tl.mt - tl.mb) / 2,
    bucketNs: W,
    processes: PROCS ? PROCS.length : 0,
    loadMs: performance.now(),
  };
  document.body.dataset.ready = '1';
})();
