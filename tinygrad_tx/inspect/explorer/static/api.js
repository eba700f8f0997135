// What every view shares: `api`, how it talks to the server, and `showView`, how one view
// brings another to the front (the page's shell, explore.js, says how with `onShowView`).
export async function api(path, body) {
  const options = body === undefined ? {} :
    { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const response = await fetch(path, options);
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer;
}

let show = null;

export function onShowView(how) {
  show = how;
}

export function showView(name) {
  return show(name);
}
